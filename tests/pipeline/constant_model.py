"""A model that predicts one value whatever the features: models.tabular's network with its head fed zeros, so
only the head's bias learns (the class shares, or the labels' mean for regression). Configured like
models.tabular (`train.model: tests.pipeline.constant_model` with the config's task section); the gates must
never bless it."""
import keras

from models import tabular


class ConstantModel(tabular.SchemaModel):
    def head(self, hidden, members: int):
        zeros = keras.layers.Dense(1, kernel_initializer="zeros", use_bias=False, trainable=False, dtype="float32",
                                   name="blindfold")(hidden)
        return super().head(zeros, members)


def configure(schema_path: str, task_config) -> ConstantModel:
    model = tabular.configure(schema_path, task_config)  # the same checks of the task section, the same task
    return ConstantModel(schema_path, model.task, model.LABEL_KEY, model.CLASSES, tuple(task_config.exclude),
                         model.dates)
