"""Where secrets live on their way to Spark tasks: in the environment, never in a pickled task.

A pipeline's secrets are the S3 keys (``storage.access_key_id``/``secret_access_key``), the
Kafka client's secret options (``sasl.username``, ``sasl.password``, ...) and the catalog's
properties. Each may be written in the pipeline file (convenient for a laptop) or come from
the environment (production: the Airflow worker's secrets, ``deploy/airflow/values.yaml``):

    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY      S3 (read by spark.archive.storage and spark.tables.catalog)
    TIDELAKE_KAFKA_SASL_USERNAME, ..._PASSWORD     Kafka option ``sasl.username`` / ``sasl.password``
                                                   (any option in KAFKA_SECRET_OPTIONS: upper case,
                                                   '.' -> '_', prefixed ``TIDELAKE_KAFKA_``)

Spark pickles every task into its closure, writes it to the driver's block manager and ships it
to executors; a secret inside would travel (and be logged on a failure) with it. So:

- the driver builds tasks from ``task_config(config)``: the config with every secret removed;
- the executor calls ``resolve(task.config)``, which puts the secrets back from where the
  driver left them: this process's registry when the task runs in the driver's own process
  (``LocalRunner``), else the executor's environment;
- ``executor_environment_of_registered()`` is what the driver gives Spark for its executors'
  environment (``SparkRunner`` sets it on the context, which PySpark hands to every Python worker,
  the way ``spark.executorEnv.*`` reaches them): each pipeline's secrets under names of its own
  (``pipeline_env_name``), so two pipelines run from one driver process never hand their tasks
  each other's keys. An executor without them (a cluster that provides keys itself) falls back to
  the plain names above.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from cdc_codecs import ConfigError
from spark.config import CatalogConfig, PipelineConfig

AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
# librdkafka options that hold credentials (CONFIGURATION.md: the ones marked sensitive, plus the user name).
KAFKA_SECRET_OPTIONS = (
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
)
KAFKA_ENV_PREFIX = "TIDELAKE_KAFKA_"
# SASL mechanisms that need a user name and password (OAUTHBEARER and GSSAPI bring their own).
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# The secrets of every pipeline whose tasks this process built, as executor environment variables.
_REGISTERED: dict[str, dict[str, str]] = {}


def kafka_env_name(option: str) -> str:
    """``sasl.password`` -> ``TIDELAKE_KAFKA_SASL_PASSWORD``."""
    return KAFKA_ENV_PREFIX + option.upper().replace(".", "_")


def from_environment(config: PipelineConfig, environ: Mapping[str, str] | None = None) -> PipelineConfig:
    """The config with Kafka secret options the file leaves out taken from the environment.

    Raises:
        ConfigError: Kafka is configured for SASL PLAIN/SCRAM and neither the file nor the
            environment gives the user name and password (naming the variables to set).
    """
    environ = os.environ if environ is None else environ
    options = dict(config.kafka_options)
    for option in KAFKA_SECRET_OPTIONS:
        value = environ.get(kafka_env_name(option))
        if option not in options and value:
            options[option] = value
    mechanism = options.get("sasl.mechanisms", options.get("sasl.mechanism", "")).upper()
    if options.get("security.protocol", "").upper().startswith("SASL") and mechanism in _PASSWORD_MECHANISMS:
        missing = [o for o in ("sasl.username", "sasl.password") if not options.get(o)]
        if missing:
            raise ConfigError(
                f"pipeline {config.name}: kafka.options sets SASL {mechanism} but no "
                f"{' or '.join(missing)}: set {' and '.join(kafka_env_name(o) for o in missing)} in the environment "
                "of the Airflow workers (deploy/airflow/values.yaml)"
            )
    return dataclasses.replace(config, kafka_options=options)


def executor_environment(config: PipelineConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables that give an executor this config's secrets (the file's, else the driver's)."""
    environ = os.environ if environ is None else environ
    storage = config.storage
    env = {
        AWS_ACCESS_KEY_ID: storage.access_key_id or environ.get(AWS_ACCESS_KEY_ID),
        AWS_SECRET_ACCESS_KEY: storage.secret_access_key or environ.get(AWS_SECRET_ACCESS_KEY),
    }
    for option in KAFKA_SECRET_OPTIONS:
        env[kafka_env_name(option)] = config.kafka_options.get(option) or environ.get(kafka_env_name(option))
    return {k: v for k, v in env.items() if v}


def task_config(config: PipelineConfig) -> PipelineConfig:
    """The config a Spark task carries: no S3 keys, no Kafka secret options, no catalog properties.

    Executors never open the catalog (the driver commits), so its properties -- a REST
    ``credential``, a URI with a password -- stay on the driver. Registers the secrets for
    ``resolve`` in this process and for ``executor_environment_of_registered``.
    """
    secrets = executor_environment(config)
    if secrets or config.name not in _REGISTERED:
        # A config already stripped (a task's, passed on) carries none: it must not erase them.
        _REGISTERED[config.name] = secrets
    return dataclasses.replace(
        config,
        storage=dataclasses.replace(config.storage, access_key_id=None, secret_access_key=None),
        kafka_options={k: v for k, v in config.kafka_options.items() if k not in KAFKA_SECRET_OPTIONS},
        catalog=CatalogConfig(config.catalog.type, config.catalog.namespace),
    )


def resolve(config: PipelineConfig) -> PipelineConfig:
    """On an executor: a task's config with its secrets back (this process's registry, else the environment)."""
    environ = _REGISTERED.get(config.name) or _ExecutorEnvironment(config.name, os.environ)
    storage = dataclasses.replace(
        config.storage,
        access_key_id=config.storage.access_key_id or environ.get(AWS_ACCESS_KEY_ID),
        secret_access_key=config.storage.secret_access_key or environ.get(AWS_SECRET_ACCESS_KEY),
    )
    options = dict(config.kafka_options)
    for option in KAFKA_SECRET_OPTIONS:
        value = environ.get(kafka_env_name(option))
        if value and option not in options:
            options[option] = value
    return dataclasses.replace(config, storage=storage, kafka_options=options)


def pipeline_env_name(pipeline: str, name: str) -> str:
    """The executor variable carrying ``name`` (``AWS_ACCESS_KEY_ID``, ``TIDELAKE_KAFKA_...``) for one
    pipeline: ``TIDELAKE_P_<pipeline, hex>__<name>`` (a pipeline name may hold characters a variable
    name may not)."""
    return f"TIDELAKE_P_{pipeline.encode().hex()}__{name}"


def executor_environment_of_registered() -> dict[str, str]:
    """The secrets of every pipeline whose tasks this process built, for executors' environment,
    each pipeline's under its own names: the last registered never overwrites another's."""
    return {pipeline_env_name(pipeline, k): v for pipeline, env in _REGISTERED.items() for k, v in env.items()}


class _ExecutorEnvironment(Mapping[str, str]):
    """An executor's environment as one pipeline's secrets: its own variables, else the plain ones."""

    def __init__(self, pipeline: str, environ: Mapping[str, str]) -> None:
        self.pipeline, self.environ = pipeline, environ

    def __getitem__(self, name: str) -> str:
        scoped = self.environ.get(pipeline_env_name(self.pipeline, name))
        if scoped is not None:
            return scoped
        return self.environ[name]

    def __iter__(self):  # noqa: ANN204
        return iter(self.environ)

    def __len__(self) -> int:
        return len(self.environ)
