"""The Trainer's executor: TFX's Trainer executor (GenericExecutor, which calls run_fn with FnArgs), handing
run_fn the candidate's ModelRun folder in custom_config when the component has that input."""
from __future__ import annotations

from tfx.components.trainer import executor as tfx_trainer_executor
from tfx.types import artifact_utils

from components.core import contract


class Executor(tfx_trainer_executor.GenericExecutor):
    """Do(): TFX's; FnArgs.custom_config also carries `candidate_run` (a folder) when that input is given."""

    def _GetFnArgs(self, input_dict, output_dict, exec_properties):
        fn_args = super()._GetFnArgs(input_dict, output_dict, exec_properties)
        if input_dict.get(contract.CANDIDATE_RUN):
            fn_args.custom_config = {**(fn_args.custom_config or {}),
                                     contract.CANDIDATE_RUN: artifact_utils.get_single_uri(
                                         input_dict[contract.CANDIDATE_RUN])}
        return fn_args
