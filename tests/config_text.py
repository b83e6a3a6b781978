"""YAML config text for tests: the bundled taxi example's config (configs/taxi.yaml) with a test's own keys over
it, written wherever the test keeps its files (paths made absolute)."""
from __future__ import annotations

import os

import yaml

from pipeline.config import DEFAULT_CONFIG, PATH_KEYS

TAXI_FOLDER = os.path.dirname(DEFAULT_CONFIG)


def taxi_settings() -> dict:
    """configs/taxi.yaml as a dict, its relative paths made absolute."""
    with open(DEFAULT_CONFIG) as handle:
        settings = yaml.safe_load(handle)
    for key in PATH_KEYS:
        if key in settings:
            settings[key] = os.path.normpath(os.path.join(TAXI_FOLDER, settings[key]))
    return settings


def required_keys() -> str:
    """The keys every config must give (those with no default), as the taxi example gives them: top-level
    YAML lines to put before a test's own text."""
    settings = taxi_settings()
    return "".join(f"{key}: {settings[key]}\n" for key in ("pipeline_name", "data_root", "schema_path"))


def taxi_config_text(text: str = "") -> str:
    """Input: YAML text of a test's keys. Output: the taxi config's YAML with those keys over it (a section's
    keys merge into the taxi config's section)."""
    settings = taxi_settings()
    for key, value in (yaml.safe_load(text) or {}).items():
        settings[key] = {**settings[key], **value} if isinstance(value, dict) and key in settings else value
    return yaml.safe_dump(settings, sort_keys=False)
