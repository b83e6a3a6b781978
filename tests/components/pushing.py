"""Helpers for tests that race pushers against each other in processes of their own."""
import multiprocessing

from components.atomic_pusher.publish import publish


def push_after_barrier(barrier, files: dict[str, str], push_dir: str, results) -> None:
    """A pusher process's target: waits at `barrier` until every pusher is ready, publishes `files` (as
    publish() takes them) to `push_dir`, and puts the new version's folder on the `results` queue.
    Importable by name, as a "spawn" multiprocessing context requires."""
    barrier.wait()
    results.put(publish(files, push_dir))


def race_pushers(count: int, files: dict[str, str], push_dir: str, timeout: float) -> list[str]:
    """Starts `count` pusher processes that publish `files` to `push_dir` at the same moment; asserts each
    exits cleanly within `timeout` seconds. Output: the version folders they published, sorted."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(count), context.Queue()
    pushers = [context.Process(target=push_after_barrier, args=(barrier, files, push_dir, results))
               for _ in range(count)]
    for pusher in pushers:
        pusher.start()
    for pusher in pushers:
        pusher.join(timeout=timeout)
        assert pusher.exitcode == 0
    return sorted(results.get(timeout=5) for _ in pushers)
