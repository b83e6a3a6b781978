"""A model that predicts one value whatever the features: models.tabular's network with its head fed zeros, so
only the head's bias learns (the class shares, or the labels' mean for regression). Configured like
models.tabular (`train.model: tests.pipeline.constant_model` with the config's task section); the gates must
never bless it."""
import keras

from components.tasks import BINARY, MULTICLASS
from models import tabular


class ConstantModel(tabular.SchemaModel):
    def build_model(self, preprocessing: keras.Model) -> keras.Model:
        network = super().build_model(preprocessing)
        inputs = {name: keras.Input(shape=(), name=name, dtype=tensor.dtype)
                  for name, tensor in preprocessing.output.items()}
        zeros = keras.layers.Dense(1, kernel_initializer="zeros", use_bias=False, trainable=False, dtype="float32",
                                   name="blindfold")(network(inputs))
        if self.TASK == MULTICLASS:
            logits = keras.layers.Dense(len(self.CLASSES), dtype="float32", name="logits")(zeros)
            output = keras.layers.Activation("softmax", dtype="float32", name="class_probabilities")(logits)
        elif self.TASK == BINARY:
            logit = keras.layers.Dense(1, dtype="float32", name="logit")(zeros)
            output = keras.layers.Activation("sigmoid", dtype="float32", name="probability")(logit)
        else:
            standardized = keras.layers.Dense(1, dtype="float32", name="standardized_prediction")(zeros)
            output = tabular.Rescale(*self._label_scale, dtype="float32", name="prediction")(standardized)
        return keras.Model(inputs, output, name="constant_model")


def configure(schema_path: str, task) -> ConstantModel:
    tabular.configure(schema_path, task)  # the same checks of the task section
    return ConstantModel(schema_path, task.type, task.label, tuple(task.classes), tuple(task.exclude))
