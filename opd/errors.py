"""The error of a config (or a job's spec) that cannot run, naming where: opd.config raises most of them, and the
modules it imports raise it too (opd.spec's spec_text), so it lives below them all."""


class ConfigError(ValueError):
    pass
