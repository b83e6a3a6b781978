"""The schema-driven model's defaults, one row per task kind: what models/tabular.py builds, what `init` writes
into a config's `train` section, and how many training records the device model's calibration rows are chosen
among. To try another value, change a row here (or, in a bench run, `bench/train_again.py --default KEY=VALUE`);
nothing else holds these numbers.

`defaults_for(task_name)` is a task's row: TABLE's for a task it lists, FALLBACK's for any other (a task of
one's own). Each row is a `Defaults`, FALLBACK with the few values that differ for that kind of task; the
comment beside a value says why it differs where the quality bench decided it (docs/benchmarks.md).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Iterator


@dataclasses.dataclass(frozen=True)
class Defaults:
    """One row of the table: a setting's name -> its default for one kind of task."""

    # ---- training: `init` writes these into the config's `train` section (components/settings.py, TrainConfig)
    learning_rate: float = 0.002  # AdamW's, for one replica's batch
    weight_decay: float = 0.0003  # AdamW's decoupled weight decay
    schedule: str = "cosine"  # after the warm-up, down to 0 at the last step
    folds: int = 8  # k-fold bagging: the members dealt to this many copies, each trained on the other folds
    early_stopping_share: float = 0.2  # stop after this share of the planned epochs without a better score...
    early_stopping_least: int = 5  # ...or at least after this many
    average_intervals: int = 5  # the best epochs' weights averaged while that improves the out-of-fold score
    search: bool = False  # the number encodings (CANDIDATES) trained in turn, the better out of fold served
    time_budget_seconds: float = 0.0  # 0: off, the plan follows from the table's size alone
    # ---- the plan: epochs for about target_steps steps, within min_epochs and max_epochs, then times plan_scale
    # within max_epochs; the batch size from the training rows (the first of batch_sizes whose rows they reach)
    target_steps: int = 3000
    min_epochs: int = 20
    max_epochs: int = 200
    plan_scale: int = 1
    batch_sizes: tuple[tuple[int, int], ...] = ((20_000, 256), (5_000, 128), (2_000, 64), (0, 32))
    # ---- the model (models/tabular.py)
    hidden_units: tuple[int, ...] = (128, 128)  # each member's dense layers
    members: int = 8  # the packed network's members, at least: k folds get k copies of ceil(members / k) each
    dropout: float = 0.1
    bins: int = 16  # quantile bins of a number's piecewise-linear encoding, at most...
    rows_per_bin: int = 40  # ...and at most one per this many training rows (fewer rows: fewer bins)
    fine_bins: int = 48  # the finer encoding, the second candidate
    fine_rows_per_bin: int = 20
    tail_bins: bool = False  # a smooth number's bins finer in its tails
    categorical_max: int = 50  # an integer with at most this many distinct values in the sample is a category
    max_vocabulary: int = 1000  # values a category's (or a code's) vocabulary keeps, the rest out of vocabulary
    embedding_width: int = 8  # an embedding's width, at most (1 + log2 of the vocabulary size below it)
    # more numeric columns than wide_numbers are encoded as one tensor, sharing at most wide_bins_total bins: a
    # graph whose size, compile time and memory do not grow with the columns. Past 128 columns a number gets fewer
    # than `bins` (2 each at 1,000): on the wide table's 1,000 columns x 2,000 rows the first layer then has 4,000
    # inputs, not 10,000, a training step takes 40% of the time, and the AUC stayed within its spread
    wide_numbers: int = 32
    wide_bins_total: int = 2048
    # a first layer whose members' own kernels over the shared features would pass this many weights gives each
    # fold copy one kernel its members share, each member scaling its inputs and adding its bias (TabM's
    # BatchEnsemble form): a step then updates members / copies times fewer of them (none fewer at 8 members in
    # 8 folds, where each member scales its inputs rather than its kernel: a product that reads the kernel once,
    # forward and backward in 40% of the time on a layer of 10 million weights; 8 times fewer without folds)
    shared_kernel_weights: int = 4_000_000
    # an integer read as a number is also read as a code when, over its values seen at least code_least_rows
    # times, the reliability of the label's per-value means is at least code_reliability and the correlation of
    # neighbouring values' means at most code_neighbour_ratio of it (an id, a school number; not an age)
    code_least_rows: int = 3
    code_reliability: float = 0.4
    code_neighbour_ratio: float = 0.1
    date_codes: bool = False  # a date's month, weekday, hour and hour of the week also as codes, each embedded
    # a category of more than statistics_min_values values, and a code, also read as the label's mean per value,
    # smoothed toward the overall mean by statistics_prior records (target statistics)
    target_statistics: bool = False
    statistics_min_values: int = 8
    statistics_prior: float = 10.0
    # ---- the device model: the full-int8 calibration rows are chosen among this many times as many training
    # records (the task's calibration_choice)
    calibration_pool: int = 1

    def plan(self, training_rows: int) -> tuple[int, int]:
        """Input: the training split's records. Output: (batch size, epochs at most)."""
        rows = max(1, training_rows)
        batch = next(size for least, size in self.batch_sizes if rows >= least)
        epochs = max(self.min_epochs, math.ceil(self.target_steps * batch / rows))
        return batch, min(self.max_epochs, self.plan_scale * epochs)

    def patience(self, epochs: int) -> int:
        """Input: the planned epochs. Output: the early-stopping patience in epochs."""
        return max(self.early_stopping_least, math.floor(round(epochs * self.early_stopping_share, 9)))

    def members_for(self, copies: int) -> int:
        """Input: the copies the Trainer bags over (1: none). Output: the packed network's members: at least
        `members`, a multiple of copies."""
        copies = max(1, copies)
        return copies * math.ceil(self.members / copies)


FALLBACK = Defaults()
_CLASSIFICATION = dataclasses.replace(
    FALLBACK,
    # ten times a regression's: chosen on the quality bench's tuning half, where it raised regressions' MAE, and
    # scored on its check half, where classifiers' AUC and accuracy rose a little
    weight_decay=0.003,
    tail_bins=True)  # finer tails helped classifiers, not regressions
TABLE: dict[str, Defaults] = {
    "binary": _CLASSIFICATION,
    "multiclass": _CLASSIFICATION,
    "regression": dataclasses.replace(
        FALLBACK,
        # wider than a classifier's: on the quality bench's tuning half the width lowered regressions' MAE and
        # did not help classifiers
        hidden_units=(256, 256),
        # twice a classifier's plan: the longer cosine lowered the MAE of the regressions whose runs reach the
        # plan's end, where classifiers stop early and lost a little
        plan_scale=2,
        # calibration rows spread over the range of the predictions, chosen among 20 times as many records
        calibration_pool=20),
}
KEYS = tuple(field.name for field in dataclasses.fields(Defaults))


def defaults_for(task_name: str) -> Defaults:
    """Input: a task's name. Output: its row of the table (FALLBACK for a task the table does not list)."""
    return TABLE.get(task_name, FALLBACK)


@contextlib.contextmanager
def overridden(**entries) -> Iterator[None]:
    """Within the block, every row (FALLBACK too) carries `entries` (name -> value): a default tried without
    editing the table. ValueError names a key that is no setting of a row."""
    global FALLBACK
    unknown = sorted(set(entries) - set(KEYS))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a default of the schema-driven model (one of {', '.join(KEYS)})")
    table, fallback = dict(TABLE), FALLBACK
    TABLE.update({name: dataclasses.replace(row, **entries) for name, row in table.items()})
    FALLBACK = dataclasses.replace(fallback, **entries)
    try:
        yield
    finally:
        TABLE.clear()
        TABLE.update(table)
        FALLBACK = fallback
