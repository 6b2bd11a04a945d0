"""Which titles read as English, and which pairs are across languages (actors/duplicates/language.py),
as the duplicate check's cross-language stage uses them."""

from __future__ import annotations

import pytest

from recalld.actors.duplicates.language import across_languages, english
from recalld.actors.duplicates.rules import title_text


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Reset password via email", True),
        ("PayPal payment fails", True),
        ("Do not show a warning when no items are selected", True),  # "do", "a", "no" are English too
        ("I/O error in the e-mail sender", True),  # "o" and "e" once normalised
        ("De-duplicate imported contacts", True),  # one weak word: "de"
        ("Login fails on example.com", True),  # one weak word: "com"
        ("Add es and pt locales", True),  # "es" alone is a locale code
        ("Set the font size in em", True),
        ("Son and parent tickets ate the quota", True),
        ("Résumé upload fails", True),  # one accented word is a loanword's, not a sign
        ("Café menu shows wrong prices", True),
        ("Pokémon cards missing from the catalogue", True),
        ("Naïve date parsing in the Zürich office", True),  # "ï" and "ü" are not Portuguese or Spanish
        ("Latency above 5 µs on the π calculation", True),  # lone Greek letters are symbols
        ("Redefinir senha por e-mail", False),  # "por"
        ("Relatório mensal em PDF", False),  # only a letter with a diacritic tells ("em" is weak)
        ("Exportar relatório de vendas para Excel", False),
        ("Limite de 3 tentativas de pagamento por pedido", False),
        ("Bloquear la cuenta tras 5 intentos fallidos", False),
        ("El pago con PayPal falla", False),
        ("Permitir al cliente bajar sus facturas en formato PDF", False),  # two weak words: "al", "sus"
        ("Aplicativo trava ao abrir a camera no iOS", False),  # "ao", accents or not
        ("A senha expira a cada 90 dias", False),
        ("Cambiar contraseña", False),  # "ñ": no English word needs it
        ("Preço errado no carrinho", False),  # "ç"
        ("Notificações duplicadas", False),  # "ã", "õ"
        ("Página inicial lenta en móvil", False),  # two accented words
        ("Relatório de vendas", False),  # an accented word and a weak word
        ("Ошибка входа в систему", False),  # Cyrillic
        ("Σφάλμα σύνδεσης", False),  # Greek
        ("ΣΦΑΛΜΑ ΣΥΝΔΕΣΗΣ", False),  # Greek capitals carry no accent
        ("ログインできない", False),  # Japanese
        ("登录失败 on Android", False),  # Chinese, with a name
        ("خطأ في تسجيل الدخول", False),  # Arabic
    ],
)
def test_a_title_reads_as_english_or_not(title: str, expected: bool) -> None:
    assert english(title) is expected
    assert english(title_text(title)) is expected  # the check sees normalised titles


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("Redefinir senha por e-mail", "Reset password via email", True),
        ("Reset password via email", "Redefinir senha por e-mail", True),
        ("Modo oscuro en la aplicación móvil", "Offline mode in the mobile app", True),
        ("Reset password via email", "Change account email address", False),
        (
            "Notificações push não chegam no Android",
            "Las notificaciones push no llegan en Android",
            False,
        ),  # PT-ES: one
        ("Redefinir senha por e-mail", "Alterar a senha da conta", False),
        ("Résumé upload fails", "Cannot upload my résumé", False),  # English both
        ("Café menu shows wrong prices", "Wrong prices on the menu", False),
        ("Ошибка входа в систему", "Login fails", True),
        ("Ошибка входа в систему", "Erro ao entrar no sistema", True),  # two scripts
        ("ログインできない", "Ошибка входа в систему", True),
        ("ログインできない", "ログインに失敗する", False),
    ],
)
def test_a_pair_is_across_languages_when_one_title_reads_as_english_and_the_other_not(
    a: str, b: str, expected: bool
) -> None:
    assert across_languages(a, b) is expected
