"""Helpers for tests that race pushers against each other in processes of their own."""
import multiprocessing
import os


def push_after_barrier(barrier, files: dict[str, str], push_dir: str, results, env: dict | None = None) -> None:
    """A pusher process's target: waits at `barrier` until every pusher is ready, publishes `files` (as
    publish() takes them) to `push_dir`, and puts the new version's folder on the `results` queue. With `env`
    (an object store's settings), sets it first and ends past native teardown, as the pipeline's own
    processes do once tensorflow-io is loaded. Importable by name, as a "spawn" multiprocessing context
    requires."""
    os.environ.update(env or {})
    from components.core.artifact_files import register_filesystems_for
    from components.atomic_pusher.publish import publish
    from components.process_exit import exit_past_native_teardown

    register_filesystems_for(push_dir)
    barrier.wait()
    results.put(publish(files, push_dir))
    if env is not None:
        results.close()
        results.join_thread()  # the result reaches the parent before the process ends without teardown
        exit_past_native_teardown(0)


def race_pushers(count: int, files: dict[str, str], push_dir: str, timeout: float, env: dict | None = None) -> list[str]:
    """Starts `count` pusher processes that publish `files` to `push_dir` at the same moment; asserts each
    exits cleanly within `timeout` seconds. Output: the version folders they published, sorted."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(count), context.Queue()
    pushers = [context.Process(target=push_after_barrier, args=(barrier, files, push_dir, results, env))
               for _ in range(count)]
    for pusher in pushers:
        pusher.start()
    for pusher in pushers:
        pusher.join(timeout=timeout)
        assert pusher.exitcode == 0
    return sorted(results.get(timeout=5) for _ in pushers)
