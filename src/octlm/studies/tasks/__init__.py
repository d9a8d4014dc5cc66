"""The synthetic task study: generators, options and presets, training, tables and ranking."""

# Registration order is TASKS' order: the state-tracking tasks (s5, parity) build on the generators' Task and come
# after them, so the package registers both before any of its modules reads TASKS.
from octlm.studies.tasks import generators, state_tasks  # noqa: F401
