"""Helpers for tests that race pushers against each other in processes of their own."""
from components.atomic_pusher.publish import publish


def push_after_barrier(barrier, files: dict[str, str], push_dir: str, results) -> None:
    """A pusher process's target: waits at `barrier` until every pusher is ready, publishes `files` (as
    publish() takes them) to `push_dir`, and puts the new version's folder on the `results` queue.
    Importable by name, as a "spawn" multiprocessing context requires."""
    barrier.wait()
    results.put(publish(files, push_dir))
