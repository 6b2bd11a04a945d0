"""The local models a daemon will run, made and set loading before the rest of its start.

Their loads (the title model's is the longest step of a start: about 1.2 s of CPU on 2 cores)
then run while PostgreSQL starts and migrates, instead of after it: `serve` calls
`load_early` before it opens the store, and `assemble` takes the models from it rather than
making its own. A model the configuration does not run is None, and so is one this function
cannot make (an unknown local model): `assemble` makes that one itself and reports it as before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from recalld.config import Config
from recalld.providers.duplicates_model import uses_title_model
from recalld.providers.local import MODEL_ALIASES, LocalProvider
from recalld.providers.title_process import TitleModelProcess


@dataclass(frozen=True)
class EarlyModels:
    recall: LocalProvider | None = None
    """The local recall model, when `[embedding] provider` is `local`."""
    title: TitleModelProcess | None = None
    """The duplicate check's title model, in a process of its own, when `[duplicates] model`
    means it."""

    def finish_loading(self, timeout: float) -> bool:
        """Blocking: wait for both loads (`InProcessModel.finish_loading`), at most `timeout`
        seconds in all; whether they finished."""
        deadline = time.monotonic() + timeout
        finished = True
        for model in (self.recall, self.title):
            if model is not None:
                finished &= model.finish_loading(max(0.0, deadline - time.monotonic()))
        return finished


def load_early(config: Config, *, cache: Path | None = None) -> EarlyModels:
    """The configuration's local models, each already loading (the recall model in a thread of
    its own, the title model in its process); `cache`: the title model's cache directory."""
    embedding = config.embedding
    recall = None
    if embedding.provider == "local" and embedding.model in MODEL_ALIASES:
        recall = LocalProvider(model=embedding.model)
        recall.start_loading()
    title = None
    if config.duplicates.enabled and uses_title_model(config.duplicates.model, embedding.provider):
        title = TitleModelProcess(cache)
        title.start_loading()
    return EarlyModels(recall=recall, title=title)
