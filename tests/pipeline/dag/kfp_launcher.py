"""Test code that plays KFP's launcher for a compiled pipeline job: it is not an orchestrator.

`StepByStepLauncher.run(run_id)` takes every task of the compiled job in DAG order and
- for a container task, builds the ExecutorInput the KFP v2 launcher builds (input artifacts from the
  producing tasks' outputs: name, the consumer's declared type, uri and the metadata the producer's
  executor output gave them; typed parameter values from the compiled constants; one output artifact per
  declared output under `<root>/<pipeline>/<run>/<task>/<key>`; a fresh output file), then runs the
  container's exact command and arguments, with `{{$}}` replaced by that ExecutorInput, and reads back the
  executor output it wrote. A step runs as a fork of an interpreter that has imported TFX's entrypoint
  (tests/warm_python.py: the same command, environment and working directory, without the imports' seconds);
- for a resolver task (which the KFP backend, not a container, runs), answers its compiled artifact query
  (`schema_title`, `state`, `metadata.<key>.number_value`, `name`, with `{{$.inputs...}}` filled from its
  input) from the artifacts earlier tasks produced, newest first, as TFX's stock strategies choose.

Nothing here knows what a step does: no caching, retries or pod scheduling; everything runs on this machine.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
import time
from typing import Callable

from tests.warm_python import KUBEFLOW_PRELOAD, run_warm


@dataclasses.dataclass
class Artifact:
    name: str  # unique, like the MLMD resource name KFP gives an artifact
    title: str  # the schema title of its type
    uri: str
    metadata: dict  # what the producing executor reported (properties and custom properties)
    order: int  # creation order: resolvers take the newest


@dataclasses.dataclass
class TaskRun:
    task: str
    seconds: float = 0.0
    outputs: dict[str, list[Artifact]] = dataclasses.field(default_factory=dict)
    executor_input: dict | None = None  # None for a resolver task


class StepFailed(AssertionError):
    pass


def artifact_title(artifact_type: dict) -> str:
    if "schemaTitle" in artifact_type:
        return artifact_type["schemaTitle"]
    match = re.search(r"^title:\s*(\S+)", artifact_type["instanceSchema"], re.MULTILINE)
    return match.group(1)


class StepByStepLauncher:
    def __init__(self, job: dict, env: dict[str, str], read: Callable[[str], bytes | None]):
        """`env`: the steps' environment (PYTHONPATH names the image's project folder); `read(uri)`: the bytes of
        a file under the pipeline root, or None when there is none. Each step forks from a warm interpreter
        (tests/warm_python.run_warm) in a new empty working directory, as in a new pod, and must leave nothing
        there."""
        self.spec = job["pipelineSpec"]
        self.root = job["runtimeConfig"]["gcsOutputDirectory"]
        self.pipeline_name = self.spec["pipelineInfo"]["name"]
        self.env = env
        self.read = read
        self.store: list[Artifact] = []  # every artifact of every run, as MLMD would keep them

    # ------------------------------------------------------------------------------------------- DAG order
    def task_order(self) -> list[str]:
        tasks = self.spec["root"]["dag"]["tasks"]
        upstream = {name: set(task.get("dependentTasks", [])) | {
            spec["taskOutputArtifact"]["producerTask"]
            for spec in task.get("inputs", {}).get("artifacts", {}).values() if "taskOutputArtifact" in spec}
            for name, task in tasks.items()}
        order, done = [], set()
        while len(order) < len(tasks):
            ready = sorted(name for name in tasks if name not in done and upstream[name] <= done)
            assert ready, f"the compiled DAG has a cycle among {sorted(set(tasks) - done)}"
            order.append(ready[0])
            done.add(ready[0])
        return order

    # ------------------------------------------------------------------------------------------------ runs
    def run(self, run_id: str) -> dict[str, TaskRun]:
        results: dict[str, TaskRun] = {}
        for name in self.task_order():
            task = self.spec["root"]["dag"]["tasks"][name]
            component = self.spec["components"][task["componentRef"]["name"]]
            executor = self.spec["deploymentSpec"]["executors"][component["executorLabel"]]
            started = time.monotonic()
            inputs = self._input_artifacts(task, component, results)
            if "resolver" in executor:
                result = TaskRun(name, outputs=self._resolve(executor["resolver"], inputs))
            else:
                result = self._run_container(name, run_id, task, component, executor["container"], inputs)
            result.seconds = time.monotonic() - started
            results[name] = result
        return results

    def _input_artifacts(self, task: dict, component: dict, results: dict[str, TaskRun]) -> dict[str, list[dict]]:
        """input key -> RuntimeArtifacts as the launcher passes them: the consumer's declared type."""
        declared = component.get("inputDefinitions", {}).get("artifacts", {})
        inputs = {}
        for key, spec in task.get("inputs", {}).get("artifacts", {}).items():
            source = spec["taskOutputArtifact"]
            produced = results[source["producerTask"]].outputs.get(source["outputArtifactKey"], [])
            inputs[key] = [{"name": artifact.name, "type": declared[key]["artifactType"], "uri": artifact.uri,
                            "metadata": {**artifact.metadata, "display_name": source["outputArtifactKey"]}}
                           for artifact in produced]
        return inputs

    def _run_container(self, name: str, run_id: str, task: dict, component: dict, container: dict,
                       inputs: dict[str, list[dict]]) -> TaskRun:
        task_root = f"{self.root}/{self.pipeline_name}/{run_id}/{name}"
        outputs = {}
        for key, definition in component.get("outputDefinitions", {}).get("artifacts", {}).items():
            outputs[key] = {"artifacts": [{
                "name": f"pipelines/{self.pipeline_name}/runs/{run_id}/artifacts/{name}.{key}",
                "type": definition["artifactType"], "uri": f"{task_root}/{key}", "metadata": {}}]}
        parameters = {}
        for key, spec in task.get("inputs", {}).get("parameters", {}).items():
            assert "runtimeValue" in spec, f"{name}.{key}: only compiled constants are played, got {spec}"
            parameters[key] = spec["runtimeValue"]["constant"]
        output_file = f"{task_root}/executor_output.json"
        assert self.read(output_file) is None, f"{output_file} exists: a task's output file must be new"
        executor_input = {"inputs": {"artifacts": {key: {"artifacts": value} for key, value in inputs.items()},
                                     "parameterValues": parameters},
                          "outputs": {"artifacts": outputs, "outputFile": output_file}}
        command = container["command"] + [json.dumps(executor_input) if arg == "{{$}}" else arg
                                          for arg in container["args"]]
        assert not [arg for arg in command if "{{$" in arg], f"{name}: a placeholder the play does not fill"
        if command[0] == "python":
            command = [sys.executable] + command[1:]
        with tempfile.TemporaryDirectory(prefix=f"{name}-pod-") as pod_disk:  # a new pod's local disk
            completed = run_warm(command, cwd=pod_disk, timeout=1200, env=self.env, preload=KUBEFLOW_PRELOAD)
            if completed.returncode != 0:
                raise StepFailed(f"{name} exited {completed.returncode}:\n{completed.stderr[-4000:]}")
            left = sorted(os.path.relpath(os.path.join(folder, file), pod_disk)
                          for folder, _, files in os.walk(pod_disk) for file in files)
            if left:  # lost with the pod: whatever reads them next runs elsewhere
                raise StepFailed(f"{name} wrote into its pod's working directory: {left[:10]}")
        executor_output = json.loads(self.read(output_file).decode())
        result = TaskRun(name, executor_input=executor_input)
        for key, declared in outputs.items():
            reported = executor_output.get("artifacts", {}).get(key, {}).get("artifacts", [{}])[0]
            original = declared["artifacts"][0]
            result.outputs[key] = [self._record(Artifact(
                name=original["name"], title=artifact_title(original["type"]), uri=reported.get("uri") or original["uri"],
                metadata={**original["metadata"], **reported.get("metadata", {})}, order=0))]
        return result

    def _record(self, artifact: Artifact) -> Artifact:
        artifact.order = len(self.store)
        self.store.append(artifact)
        return artifact

    # ------------------------------------------------------------------------------------------- resolvers
    def _resolve(self, resolver: dict, inputs: dict[str, list[dict]]) -> dict[str, list[Artifact]]:
        outputs = {}
        for key, query in resolver["outputArtifactQueries"].items():
            conditions = [self._condition(clause, inputs) for clause in query["filter"].split(" AND ")]
            matching = [artifact for artifact in self.store if all(condition(artifact) for condition in conditions)]
            outputs[key] = sorted(matching, key=lambda artifact: artifact.order)[-1:]
        return outputs

    @staticmethod
    def _condition(clause: str, inputs: dict[str, list[dict]]):
        def input_metadata(match):
            key, field = match.group(1), match.group(2)
            artifacts = inputs.get(key) or [{"metadata": {}}]
            return str(artifacts[0]["metadata"].get(field, ""))

        clause = re.sub(r"\{\{\$\.inputs\.artifacts\['([^']+)'\]\.metadata\['([^']+)'\]\}\}", input_metadata, clause)
        if match := re.fullmatch(r'schema_title="([^"]+)"', clause):
            return lambda artifact: artifact.title == match.group(1)
        if clause == "state=LIVE":
            return lambda artifact: True  # the play never deletes or abandons an artifact
        if match := re.fullmatch(r"metadata\.(\w+)\.number_value=([\d.]+)", clause):
            return lambda artifact: artifact.metadata.get(match.group(1)) == float(match.group(2))
        if match := re.fullmatch(r'name="([^"]*)"', clause):
            return lambda artifact: artifact.name == match.group(1)
        raise AssertionError(f"a resolver query clause the play does not know: {clause!r}")
