"""BuildKit-only COPY --chmod, rewritten for the engine's classic builder (docker-py has no
BuildKit): the copy, then a chmod of what it copied, as root; nothing else changes."""

from orchestrator.tasks.dockerfile import for_classic_builder


def test_a_dockerfile_without_chmod_is_sent_as_it_is():
    text = "FROM python:3.12\nRUN echo a \\\n  && echo b\nCOPY x /x\n"
    assert for_classic_builder(text) == (text, [])


def test_copy_chmod_becomes_a_copy_and_a_chmod_of_each_target_as_root():
    text, notes = for_classic_builder(
        "FROM python:3.12\nUSER app\nCOPY --chmod=755 entrypoint.sh /entrypoint.sh\n"
        "COPY --chown=app --chmod=0644 a.txt b.txt /srv/\nFROM debian\nADD --chmod=700 run.sh /usr/local/bin/\n")
    assert text.splitlines() == [
        "FROM python:3.12", "USER app",
        "COPY entrypoint.sh /entrypoint.sh", "USER root", "RUN chmod -R 755 /entrypoint.sh", "USER app",
        "COPY --chown=app a.txt b.txt /srv/", "USER root", "RUN chmod -R 0644 /srv/a.txt /srv/b.txt", "USER app",
        "FROM debian",  # a new stage starts as root
        "ADD run.sh /usr/local/bin/", "RUN chmod -R 700 /usr/local/bin/run.sh"]
    assert len(notes) == 3 and "requires" not in text
