"""Every task in TASKS, and a task of one's own named by its module:Class path (the quantile task of
tests/pipeline/dag/quantile_task.py), through the same checks: each part a task must define is its own, and the
parts agree with each other (the label it parses is one it allows, the schema-driven head gives the output its
scoring and serving read, the per-example values average to its metrics, no constant model beats its trivial
predictor, its TFMA metrics exist). A task added to TASKS is checked here without a line of this file
changing."""
import numpy as np
import pytest
import tensorflow as tf

from components.core import tasks
from components.settings import TaskConfig

ABSTRACT = ("class_problem", "label_problem", "loss", "keras_metrics", "serving_outputs", "output_description",
            "tfma_metrics", "score", "trivial_predictions", "trivial_description", "parse_label", "output_layer")
CANDIDATE_CLASSES = ((), ("no", "yes"), ("red", "green", "blue"))
MEMBERS, ROWS = 2, 300


def _classes(task: tasks.Task) -> tuple[str, ...]:
    """The first of CANDIDATE_CLASSES the task takes."""
    return next(classes for classes in CANDIDATE_CLASSES if not task.class_problem(classes))


def _labels(task: tasks.Task, classes: tuple[str, ...], rng) -> np.ndarray:
    """Labels as the task parses them from a raw label column: class names, or whole numbers >= 0 as floats
    (which every task without classes shipped or tested here allows)."""
    raw = (tf.constant(rng.choice(classes, ROWS)) if classes else
           tf.constant(rng.poisson(3.0, ROWS).astype(np.float32)))
    return task.parse_label(raw, classes).numpy().reshape(-1)


def _predictions(task: tasks.Task, classes: tuple[str, ...], labels: np.ndarray, rng) -> np.ndarray:
    """The schema-driven head's output for random members' outputs, averaged over members: [N, width]."""
    width = task.output_width(classes)
    layer = task.output_layer(labels, "head")
    members = layer(tf.constant(rng.normal(0.0, 1.0, (ROWS, MEMBERS, width)), tf.float32))
    assert members.dtype == tf.float32  # float32 whatever the precision policy
    return members.numpy().mean(axis=1)


def _scored(predictions: np.ndarray) -> np.ndarray:
    """The prediction_key output as score() takes it: [N] for a width of 1."""
    return predictions.reshape(-1) if predictions.shape[1] == 1 else predictions


OWN_TASK = "tests.pipeline.dag.quantile_task:QuantileTask"


@pytest.fixture(params=[*sorted(tasks.TASKS), OWN_TASK], ids=str)
def task(request, monkeypatch) -> tasks.Task:
    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))  # a task of one's own is known to this test alone
    return tasks.task_named(request.param)


def test_the_task_defines_every_part_of_its_own(task):
    inherited = [name for name in ABSTRACT if getattr(type(task), name) is getattr(tasks.Task, name)]
    assert inherited == [], f"{task.name} leaves {inherited} to the base, which raises NotImplementedError"
    assert task.primary in task.metrics and task.primary in task.gateable()
    assert tasks.task_named(task.name) is task


def test_the_task_configured_from_a_plain_task_section_has_its_default_settings(task):
    configured = task.configured(TaskConfig(type=task.name))
    assert type(configured) is type(task)
    assert {name: getattr(configured, name) for name in task.settings} == task.settings


def test_parsed_labels_are_allowed_counted_and_of_the_tasks_dtype(task):
    rng = np.random.default_rng(0)
    classes = _classes(task)
    labels = _labels(task, classes, rng)
    assert labels.dtype == np.dtype(task.label_dtype)
    assert not task.invalid_labels(labels, classes).any()
    task.check_labels(labels, classes, "eval split")
    summary = task.summarize_labels(labels, classes)
    assert summary.examples == ROWS and sum(summary.class_counts) in (0, ROWS)


def test_the_head_serves_and_scores_the_outputs_the_task_names(task):
    rng = np.random.default_rng(1)
    classes = _classes(task)
    labels = _labels(task, classes, rng)
    predictions = _predictions(task, classes, labels, rng)
    outputs = task.serving_outputs(tf.constant(predictions), classes)
    assert outputs[task.prediction_key].shape[0] == ROWS
    scores = task.score(labels, _scored(predictions))
    assert set(scores) == {metric.name for metric in task.metrics}
    assert all(np.isfinite(value) for value in scores.values())
    for metric in task.gateable():
        if metric is not tasks.AUC:  # AUC is no average over examples
            per_example = task.per_example(metric, labels, _scored(predictions))
            assert per_example.shape == (ROWS,) and per_example.mean() == pytest.approx(scores[metric.name])
    for loss in (task.loss(), task.training_loss()):
        value = float(loss(tf.constant(labels), tf.constant(predictions, tf.float32)))
        assert np.isfinite(value)


def test_no_constant_model_beats_the_trivial_predictor(task):
    rng = np.random.default_rng(2)
    classes = _classes(task)
    labels = _labels(task, classes, rng)
    trivial = task.trivial_predictions(labels, classes)
    trivial_score = task.score(labels, trivial)[task.primary.name]
    predictions = _predictions(task, classes, labels, rng)
    constants = [np.repeat(predictions[i:i + 1], ROWS, axis=0) for i in range(0, ROWS, 30)]
    constants += [np.full_like(predictions, value) for value in np.quantile(labels, (0.1, 0.5, 0.9))]
    for constant in constants:
        score = task.score(labels, _scored(constant))[task.primary.name]
        assert task.primary.improvement(score, trivial_score) <= 1e-9, (constant[0], score, trivial_score)
    assert task.trivial_description(labels, classes)


def test_the_tfma_metrics_the_task_names_exist_in_tfma_or_keras(task):
    import tensorflow_model_analysis as tfma
    import tf_keras

    for names, class_ids in task.tfma_metrics(len(_classes(task))):  # TFMA resolves a class name in either
        assert all(hasattr(tfma.metrics, name) or hasattr(tf_keras.metrics, name) for name in names), names
        assert all(0 <= class_id < max(1, len(_classes(task))) for class_id in class_ids)


def test_a_task_setting_given_to_a_task_that_does_not_take_it_is_named():
    with pytest.raises(tasks.TaskError, match=r"task\.label_transform: 'log' applies to a regression task, not a "
                                              r"binary one"):
        tasks.task_named("binary").configured(TaskConfig(type="binary", label_transform="log"))
    configured = tasks.task_named("regression").configured(TaskConfig(type="regression", label_transform="log"))
    assert configured.label_transform == "log" and tasks.task_named("regression").label_transform == "none"


def test_a_task_of_ones_own_is_registered_by_name_and_no_other_task_is_replaced(monkeypatch):
    class Renamed(tasks.RegressionTask):
        name = "binary"

    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    with pytest.raises(tasks.TaskError, match="a task named 'binary' is known already"):
        tasks.register_task(Renamed())
    Renamed.name = "renamed"
    registered = tasks.register_task(Renamed())
    assert tasks.task_named("renamed") is registered


def test_a_task_of_ones_own_is_named_by_its_module_and_class_and_known_under_that_name(monkeypatch):
    from tests.pipeline.dag import quantile_task

    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    task = tasks.task_named(OWN_TASK)
    assert type(task) is quantile_task.QuantileTask and task.name == OWN_TASK and tasks.TASKS[OWN_TASK] is task
    assert quantile_task.QuantileTask().name == OWN_TASK  # a class that names itself not: its path, in any process
    assert tasks.task_declared(quantile_task.QuantileTask()).name == OWN_TASK
    assert tasks.PredictionTarget("y", OWN_TASK).task is task
    assert task.configured(TaskConfig(type=OWN_TASK)).name == OWN_TASK
    for wrong, message in (("tests.pipeline.dag.quantile_task:PINBALL", "defines no Task subclass PINBALL"),
                           ("tests.pipeline.dag.quantile_task:pinball", "defines no Task subclass pinball"),
                           ("no_such_module_here:Task", "importing 'no_such_module_here' failed: ModuleNotFoundError"),
                           ("quantile", "unknown task 'quantile'")):
        with pytest.raises(tasks.TaskError, match=message):
            tasks.task_named(wrong)
    assert OWN_TASK in tasks.TASKS and "quantile" not in tasks.TASKS
