"""Loading a golden set as a user writes it: both shapes, paths resolved, clear refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from recalld.eval.golden import DEFAULT_KIND, GoldenSetError, load, slug


def corpus(root: Path, *names: str) -> Path:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {name}\n\ntext of {name}\n")
    return root


def folder_set(tmp_path: Path, questions: str, *files: str) -> Path:
    golden = tmp_path / "handbook"
    corpus(golden / "corpus", *(files or ("guide/install.md", "faq.txt")))
    (golden / "questions.toml").write_text(questions)
    return golden


def test_a_folder_set_resolves_expected_paths_with_or_without_suffix(tmp_path: Path) -> None:
    golden = folder_set(
        tmp_path,
        """
corpus = "our handbook"

[[question]]
question = "how do I install it"
expected = "guide/install.md"
kind = "natural"

[[question]]
id = "faq-1"
question = "--verbose"
expected = ["faq", "./guide/install"]
evidence = "notes for readers are allowed"
""",
    )
    found = load(golden)
    assert found.name == "handbook"
    assert found.description == "our handbook"
    assert found.corpus == (golden / "corpus").resolve()
    assert found.floor_path == golden / "floor.json"
    assert found.files == ("faq.txt", "guide/install.md")
    first, second = found.questions
    assert (first.id, first.kind, first.text, first.expected) == (
        "q1",
        "natural",
        "how do I install it",
        ("guide/install.md",),
    )
    assert (second.id, second.kind, second.expected) == ("faq-1", DEFAULT_KIND, ("faq.txt", "guide/install.md"))
    assert found.kinds == ["natural", DEFAULT_KIND]
    assert found.relative(str(found.corpus / "guide/install.md")) == "guide/install.md"
    assert found.relative("/elsewhere/x.md") is None
    assert found.relative(None) is None


def test_a_toml_set_names_its_corpus_and_floor_beside_it(tmp_path: Path) -> None:
    corpus(tmp_path / "pages", "a.txt", "b.txt")
    (tmp_path / "sets").mkdir()
    source = tmp_path / "sets" / "pages.toml"
    source.write_text('corpus_path = "../pages"\n[[question]]\nquestion = "q"\nexpected = ["a"]\n')
    found = load(source)
    assert found.name == "pages"
    assert found.corpus == (tmp_path / "pages").resolve()
    assert found.floor_path == tmp_path / "sets" / "pages.floor.json"
    elsewhere = corpus(tmp_path / "copy", "a.txt")
    assert load(source, corpus=elsewhere).corpus == elsewhere.resolve()


@pytest.mark.parametrize(
    ("questions", "message"),
    [
        ("[[question]\n", "not valid TOML"),
        ('corpus_pth = "x"\n[[question]]\nquestion = "q"\nexpected = "faq"\n', "unknown key.*corpus_pth"),
        ('corpus = "x"\n', "no questions"),
        ('[[question]]\nquestion = "q"\nexpect = "faq"\n', r"question 1: unknown key\(s\) expect"),
        ('[[question]]\nquestion = "  "\nexpected = "faq"\n', "question 1: question is missing or empty"),
        ('[[question]]\nquestion = "q"\n', "question 1: expected must name at least one"),
        ('[[question]]\nquestion = "q"\nexpected = []\n', "expected must name at least one"),
        ('[[question]]\nquestion = "q"\nexpected = [3]\n', "expected must name at least one"),
        ('[[question]]\nquestion = "q"\nexpected = "nope.md"\n', "question 1: expected 'nope.md' is not a file"),
        ('[[question]]\nquestion = "q"\nkind = 2\nexpected = "faq"\n', "kind must be a string"),
        (
            '[[question]]\nid = "a"\nquestion = "q"\nexpected = "faq"\n'
            '[[question]]\nid = "a"\nquestion = "r"\nexpected = "faq"\n',
            "question 2: id 'a' is also question 1's",
        ),
    ],
)
def test_refusals_name_the_file_question_and_field(tmp_path: Path, questions: str, message: str) -> None:
    golden = folder_set(tmp_path, questions)
    with pytest.raises(GoldenSetError, match=message) as refused:
        load(golden)
    assert str(golden / "questions.toml") in str(refused.value)


def test_an_expected_stem_two_files_share_must_name_its_suffix(tmp_path: Path) -> None:
    golden = folder_set(tmp_path, '[[question]]\nquestion = "q"\nexpected = "notes"\n', "notes.md", "notes.txt")
    with pytest.raises(GoldenSetError, match=r"could be any of notes\.md, notes\.txt"):
        load(golden)


def test_refusals_of_the_shape(tmp_path: Path) -> None:
    with pytest.raises(GoldenSetError, match="no such folder or TOML file"):
        load(tmp_path / "missing")
    with pytest.raises(GoldenSetError, match=r"holds questions\.toml"):
        load(tmp_path)
    lone = tmp_path / "lone.toml"
    lone.write_text('[[question]]\nquestion = "q"\nexpected = "a"\n')
    with pytest.raises(GoldenSetError, match="say where the corpus is"):
        load(lone)
    lone.write_text('corpus_path = "empty"\n[[question]]\nquestion = "q"\nexpected = "a"\n')
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(GoldenSetError, match="no corpus files"):
        load(lone)


def test_slug_keeps_a_namespace_readable() -> None:
    assert slug("pgdocs") == "pgdocs"
    assert slug("my set: v2/ci") == "my-set-v2-ci"
    assert slug("///") == "golden"
