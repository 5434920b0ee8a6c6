"""What every record says about the code and the machine behind it (initnorm/provenance.py)."""

from importlib import metadata

from initnorm import provenance


def test_the_installed_versions_are_read_once_per_process_and_the_machine_every_time(monkeypatch):
    """Every member of a group writes its record: reading Lightning's metadata for each cost ~2 ms a member."""
    import torch

    read, version = [], metadata.version
    monkeypatch.setattr(provenance.metadata, "version", lambda name: read.append(name) or version(name))
    provenance.installed.cache_clear()
    threads = torch.get_num_threads()
    try:
        first = provenance.describe()
        torch.set_num_threads(threads + 1)
        second = provenance.describe()
    finally:
        torch.set_num_threads(threads)
    assert read == ["lightning"] and first["lightning"] == second["lightning"] == version("lightning")
    assert second["machine"]["threads"] == first["machine"]["threads"] + 1  # the machine as it is now: not cached
