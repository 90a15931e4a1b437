"""The Kubernetes deployment, checked offline (there is no cluster here).

* every object under deploy/k8s/manifests validates against the Kubernetes schemas kubernetes-validate
  ships, for the Kubernetes release :data:`KUBERNETES` (strict: an unknown field is an error);
* the Helm values use only keys the dagster/dagster chart declares, for the sections they fill (a
  copy of the chart's own pydantic models for those sections, extra keys forbidden: the chart's
  values.schema.json is not shipped in any package, and nothing is downloaded at test time), and every
  Kubernetes fragment in them (probes, resources, env sources) validates against the same schemas;
* the run monitoring, run retries and limits of the Helm values, deploy/k8s/dagster.yaml and
  deploy/celery/dagster.yaml agree;
* DagsterInstance loads deploy/k8s/dagster.yaml with its K8sRunLauncher (pointed at a kubeconfig written
  here instead of the pod's service account), and the launcher's config is valid as shipped;
* the Dockerfile installs the lock as `make` does and serves the code location on the port the values
  and manifests probe.

* what the chart's instance config map renders of run monitoring and run retries, by its template's
  logic as read (the keys it passes through, then additionalInstanceConfig verbatim), holds every key
  of the instance files.

What is not tested: the chart rendered by `helm` (there is none here), and anything a cluster does.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import dagster as dg
import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel, ConfigDict
from referencing import Registry, Resource

from ragspine_pipeline.defs.judge import DEPLOYED_POOLS as POOLS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
MANIFESTS = sorted((K8S / "manifests").glob("*.yaml"))
# The Kubernetes release the objects are checked against (kubernetes-validate 1.37.0 ships 1.25-1.37).
KUBERNETES = "1.33"
PORT = 3030  # the code server's
HEALTH_CHECK = ["dagster", "api", "grpc-health-check", "-p", str(PORT)]


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text("utf-8")) if doc]


OBJECTS = [
    pytest.param(doc, id=f"{path.name}:{doc['kind']}/{doc['metadata']['name']}")
    for path in MANIFESTS
    for doc in documents(path)
]


def test_there_are_manifests_for_each_process():
    kinds = {(doc.values[0]["kind"], doc.values[0]["metadata"]["name"]) for doc in OBJECTS}
    names = {"ragspine-code-server", "ragspine-daemon", "ragspine-webserver", "ragspine-celery-worker"}
    assert {("Deployment", name) for name in names} <= kinds
    assert ("Job", "ragspine-setup") in kinds and ("ServiceAccount", "ragspine-dagster") in kinds


@pytest.mark.parametrize("manifest", OBJECTS)
def test_every_manifest_validates_against_the_kubernetes_schemas(manifest):
    assert kubernetes_validate.validate(manifest, KUBERNETES, strict=True) == KUBERNETES


def _definitions() -> Registry:
    folder = resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
    schemas = json.loads(folder.joinpath(f"v{KUBERNETES}.0-local-strict", "_definitions.json").read_text())
    return Resource.from_contents(schemas) @ Registry()


def k8s_fragment(value: Any, definition: str) -> None:
    """Validate ``value`` as the Kubernetes API type ``definition`` (``io.k8s.api.core.v1.Probe``)."""
    schema = {"$ref": f"https://kubernetes.io/api/_definitions.json#/$defs/{definition}"}
    jsonschema.Draft202012Validator(schema, registry=_definitions()).validate(value)


# The sections of the chart's values this project fills, as the chart's own models declare them
# (helm/dagster/schema in the dagster repository, release 1.13): a key the chart does not know fails.
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Image(_Strict):
    repository: str
    tag: str
    pullPolicy: str


class Enabled(_Strict):
    enabled: bool


class UserDeployment(_Strict):
    name: str
    image: Image
    codeServerArgs: list[str]
    port: int
    includeConfigInLaunchedRuns: Enabled
    envConfigMaps: list[dict]
    envSecrets: list[dict]
    readinessProbe: dict
    livenessProbe: dict
    startupProbe: dict
    resources: dict


class UserDeployments(_Strict):
    enabled: bool
    enableSubchart: bool
    deployments: list[UserDeployment]


class K8sRunLauncherConfig(_Strict):
    imagePullPolicy: str
    loadInclusterConfig: bool
    envConfigMaps: list[dict]
    envSecrets: list[dict]
    failPodOnRunFailure: bool
    resources: dict


class RunLauncherConfig(_Strict):
    k8sRunLauncher: K8sRunLauncherConfig


class RunLauncher(_Strict):
    type: str
    config: RunLauncherConfig


class RunCoordinator(_Strict):
    enabled: bool
    type: str
    config: dict


class RunMonitoring(_Strict):
    enabled: bool
    startTimeoutSeconds: int | None = None
    maxRuntimeSeconds: int | None = None
    pollIntervalSeconds: int | None = None
    maxResumeRunAttempts: int | None = None
    freeSlotsAfterRunEndSeconds: int | None = None


class RunRetries(_Strict):
    enabled: bool
    maxRetries: int | None = None
    retryOnAssetOrOpFailure: bool | None = None


class Daemon(_Strict):
    enabled: bool
    envSecrets: list[dict]
    runCoordinator: RunCoordinator
    runMonitoring: RunMonitoring
    runRetries: RunRetries


class TagLimit(_Strict):
    key: str
    value: dict | str | None = None
    limit: int


class ConcurrencyRuns(_Strict):
    maxConcurrentRuns: int
    tagConcurrencyLimits: list[TagLimit]


class ConcurrencyPools(_Strict):
    defaultLimit: int


class Concurrency(_Strict):
    enabled: bool
    pools: ConcurrencyPools
    runs: ConcurrencyRuns


class PostgreSQL(_Strict):
    enabled: bool
    postgresqlHost: str
    postgresqlUsername: str
    postgresqlDatabase: str
    postgresqlScheme: str
    service: dict


class Webserver(_Strict):
    envSecrets: list[dict]
    readinessProbe: dict
    livenessProbe: dict


class S3ComputeLogs(_Strict):
    bucket: str
    prefix: str
    region: str


class ComputeLogManagerConfig(_Strict):
    s3ComputeLogManager: S3ComputeLogs


class ComputeLogManager(_Strict):
    type: str
    config: ComputeLogManagerConfig


class Global(_Strict):
    postgresqlSecretName: str
    dagsterHome: str


class Values(_Strict):
    global_: Global
    generatePostgresqlPasswordSecret: bool
    postgresql: PostgreSQL
    telemetry: Enabled
    dagsterWebserver: Webserver
    dagster_user_deployments: UserDeployments
    runLauncher: RunLauncher
    dagsterDaemon: Daemon
    concurrency: Concurrency
    additionalInstanceConfig: dict[str, Any] = {}
    computeLogManager: ComputeLogManager


def helm_values() -> dict:
    return yaml.safe_load((K8S / "values.yaml").read_text("utf-8"))


def test_the_helm_values_use_only_keys_the_chart_declares():
    raw = helm_values()
    renamed = {re.sub(r"^global$", "global_", key).replace("-", "_"): value for key, value in raw.items()}
    values = Values.model_validate(renamed)
    assert values.runLauncher.type == "K8sRunLauncher"
    assert values.dagsterDaemon.runCoordinator.type == "QueuedRunCoordinator"
    assert values.computeLogManager.type == "S3ComputeLogManager"
    # The chart refuses run limits both under concurrency and on the queued run coordinator.
    assert values.dagsterDaemon.runCoordinator.config == {"queuedRunCoordinator": {}}


def test_the_kubernetes_fragments_of_the_helm_values_validate():
    values = helm_values()
    [deployment] = values["dagster-user-deployments"]["deployments"]
    webserver = values["dagsterWebserver"]
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    probes = [deployment[name] for name in ("readinessProbe", "livenessProbe", "startupProbe")]
    for probe in [*probes, webserver["readinessProbe"], webserver["livenessProbe"]]:
        # `enabled` is the chart's own switch, not a field of the Kubernetes Probe.
        k8s_fragment({k: v for k, v in probe.items() if k != "enabled"}, "io.k8s.api.core.v1.Probe")
    for probe in probes:
        assert probe["exec"]["command"] == HEALTH_CHECK
    assert webserver["livenessProbe"]["httpGet"]["path"] == "/server_info"
    for owner in (deployment, launcher, values["dagsterDaemon"], webserver):
        for source in owner["envSecrets"]:
            k8s_fragment(source, "io.k8s.api.core.v1.SecretEnvSource")
    for owner in (deployment, launcher):
        for source in owner["envConfigMaps"]:
            k8s_fragment(source, "io.k8s.api.core.v1.ConfigMapEnvSource")
        k8s_fragment(owner["resources"], "io.k8s.api.core.v1.ResourceRequirements")
    assert deployment["port"] == PORT and deployment["codeServerArgs"] == [
        "-m",
        "ragspine_pipeline.definitions",
    ]


def test_no_secret_value_is_written_in_the_deployment_files():
    """Secrets come from Kubernetes Secrets by name: no Secret object, no password or token value."""
    kinds = {doc.values[0]["kind"] for doc in OBJECTS}
    assert "Secret" not in kinds
    for path in [K8S / "values.yaml", K8S / "dagster.yaml", *MANIFESTS]:
        for doc in documents(path):
            for key, value in _leaves(doc):
                if isinstance(value, bool) or re.search(r"secret(_?name)?$", key, re.IGNORECASE):
                    continue  # a switch, or the name of a Kubernetes Secret
                if re.search(r"password|token|secret_access|api_key", key, re.IGNORECASE):
                    assert isinstance(value, dict) or value in (None, ""), f"{path.name}: {key}"


def _leaves(node: Any, key: str = ""):
    if isinstance(node, dict):
        if set(node) == {"env"} or "secretKeyRef" in node:
            yield key, node
            return
        for name, value in node.items():
            yield from _leaves(value, str(name))
    elif isinstance(node, list):
        for value in node:
            yield from _leaves(value, key)
    else:
        yield key, node


# What the chart's instance config map (helm/dagster/templates/configmap-instance.yaml of
# dagster-io/dagster, as read) renders of dagsterDaemon.runMonitoring and .runRetries: these keys only,
# each under its snake_case name; additionalInstanceConfig is appended verbatim (`toYaml`).
CHART_RUN_MONITORING_KEYS = (
    "enabled",
    "startTimeoutSeconds",
    "cancelTimeoutSeconds",
    "maxResumeRunAttempts",
    "pollIntervalSeconds",
    "freeSlotsAfterRunEndSeconds",
)
CHART_RUN_RETRIES_KEYS = ("enabled", "maxRetries")


def chart_instance_sections(values: dict) -> dict:
    """The run_monitoring and run_retries the chart's template writes into dagster.yaml for ``values``,
    by the template's own logic: its sections when enabled, with the keys it passes through, then
    additionalInstanceConfig (a later key replaces an earlier one when YAML is read)."""
    daemon = values["dagsterDaemon"]
    out: dict = {}
    for section, chart, keys in (
        ("run_monitoring", "runMonitoring", CHART_RUN_MONITORING_KEYS),
        ("run_retries", "runRetries", CHART_RUN_RETRIES_KEYS),
    ):
        given = daemon.get(chart) or {}
        if daemon.get("enabled") and given.get("enabled"):
            out[section] = {_snake(key): given[key] for key in keys if given.get(key) is not None}
    out.update(values.get("additionalInstanceConfig") or {})
    return out


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def test_the_chart_would_drop_keys_the_values_once_gave_it():
    """Why the values carry run monitoring and run retries in additionalInstanceConfig: given the chart's
    own sections, the maximum runtime and retry_on_asset_or_op_failure would be lost."""
    values = {
        "dagsterDaemon": {
            "enabled": True,
            "runMonitoring": {"enabled": True, "startTimeoutSeconds": 300, "maxRuntimeSeconds": 14400},
            "runRetries": {"enabled": True, "maxRetries": 1, "retryOnAssetOrOpFailure": False},
        }
    }
    rendered = chart_instance_sections(values)
    assert "max_runtime_seconds" not in rendered["run_monitoring"]
    assert "retry_on_asset_or_op_failure" not in rendered["run_retries"]
    shipped = chart_instance_sections(helm_values())
    assert shipped["run_monitoring"]["max_runtime_seconds"] == 14400
    assert shipped["run_retries"]["retry_on_asset_or_op_failure"] is False


def test_the_helm_values_and_the_instance_files_say_the_same():
    values = helm_values()
    k8s = yaml.safe_load((K8S / "dagster.yaml").read_text("utf-8"))
    celery = yaml.safe_load((ROOT / "deploy" / "celery" / "dagster.yaml").read_text("utf-8"))
    for instance in (k8s, celery):
        rendered = chart_instance_sections(values)
        for section in ("run_monitoring", "run_retries"):
            for key, value in instance[section].items():  # every key reaches the rendered dagster.yaml
                assert rendered[section].get(key) == value, (section, key)
        assert (
            instance["concurrency"]["pools"]["default_limit"]
            == values["concurrency"]["pools"]["defaultLimit"]
        )
        runs = instance["concurrency"]["runs"]
        chart_runs = values["concurrency"]["runs"]
        assert runs["max_concurrent_runs"] == chart_runs["maxConcurrentRuns"]
        assert runs["tag_concurrency_limits"] == chart_runs["tagConcurrencyLimits"]
    assert set(k8s) - {"run_launcher"} == set(celery) - {"run_launcher"}


def test_every_shipped_instance_admits_one_run_per_service_and_index_version():
    """The run queue's limit is on the sensor's per-service tag (``support_bot@ix-0042``), not on the bare
    index version: two services whose index versions share a name never wait for each other."""
    from ragspine_pipeline.defs.automation import EVALUATION_TAG, evaluation_tag

    assert evaluation_tag("support_bot", "ix-1") != evaluation_tag("second_bot", "ix-1")
    limit = {"key": EVALUATION_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    for folder in ("postgres", "celery", "k8s"):
        instance = yaml.safe_load((ROOT / "deploy" / folder / "dagster.yaml").read_text("utf-8"))
        assert instance["concurrency"]["runs"]["tag_concurrency_limits"] == [limit], folder
    assert helm_values()["concurrency"]["runs"]["tagConcurrencyLimits"] == [limit]


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
  - name: nowhere
    cluster: {server: "https://127.0.0.1:9"}
users:
  - name: nobody
    user: {token: not-a-token}
contexts:
  - name: nowhere
    context: {cluster: nowhere, user: nobody}
current-context: nowhere
"""

K8S_ENV = {
    "DAGSTER_K8S_JOB_NAMESPACE": "ragspine",
    "DAGSTER_K8S_SERVICE_ACCOUNT": "ragspine-dagster",
    "DAGSTER_K8S_INSTANCE_CONFIG_MAP": "ragspine-instance",
    "DAGSTER_K8S_PG_PASSWORD_SECRET": "ragspine-postgresql",
    "RAGSPINE_K8S_CONFIG_MAP": "ragspine-settings",
    "RAGSPINE_K8S_SECRET": "ragspine-secrets",
    "DAGSTER_COMPUTE_LOG_BUCKET": "evals",
    "DAGSTER_COMPUTE_LOG_PREFIX": "compute-logs",
    "DAGSTER_S3_ENDPOINT_URL": "http://127.0.0.1:9",
}


def test_the_k8s_instance_config_loads_with_its_k8s_run_launcher(tmp_path, monkeypatch, aws_env):
    """As shipped, but for two things only a cluster has: its PostgreSQL (SQLite here) and the pod's
    service account (a kubeconfig file naming a closed port: nothing is contacted)."""
    from dagster_k8s import K8sRunLauncher

    for name, value in K8S_ENV.items():
        monkeypatch.setenv(name, value)
    config = yaml.safe_load((K8S / "dagster.yaml").read_text("utf-8"))
    storage = config.pop("storage")["custom"]
    assert (
        storage["class"] == "PostgresStorage"
        and storage["module"] == "ragspine_pipeline.defs.instance_storage"
    )
    assert storage["config"]["postgres_db"]["scheme"] == "postgresql+psycopg2"
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    launcher = config["run_launcher"]["config"]
    launcher.update(load_incluster_config=False, kubeconfig_file=str(tmp_path / "kubeconfig"))
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))

    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert isinstance(instance.run_launcher, K8sRunLauncher)
        assert instance.run_launcher.job_namespace == "ragspine"
        assert instance.run_launcher.env_secrets == ["ragspine-secrets"]
        assert instance.run_launcher.env_config_maps == ["ragspine-settings"]
        assert instance.run_launcher.supports_check_run_worker_health
        assert instance.run_monitoring_settings["max_runtime_seconds"] == 14400
        assert instance.run_monitoring_settings["poll_interval_seconds"] == 30
        assert instance.run_retries_max_retries == 1
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        assert type(instance.compute_log_manager).__name__ == "S3ComputeLogManager"


def test_the_shipped_k8s_run_launcher_config_is_valid_as_shipped(monkeypatch):
    from dagster._config import process_config
    from dagster_k8s import K8sRunLauncher

    for name, value in K8S_ENV.items():
        monkeypatch.setenv(name, value)
    config = yaml.safe_load((K8S / "dagster.yaml").read_text("utf-8"))["run_launcher"]
    assert (config["module"], config["class"]) == ("dagster_k8s", "K8sRunLauncher")
    result = process_config(K8sRunLauncher.config_type(), config["config"])
    assert result.success, result.errors
    assert result.value["load_incluster_config"] is True
    assert result.value["instance_config_map"] == "ragspine-instance"


def test_the_dockerfile_installs_the_lock_as_make_does_and_serves_the_code_location():
    text = (K8S / "Dockerfile").read_text("utf-8")
    instructions = [line for line in re.sub(r"\\\n\s*", " ", text).splitlines() if line and line[0] != "#"]
    assert instructions[0] == "FROM python:3.11-slim"
    makefile = (ROOT / "Makefile").read_text("utf-8")
    uv_version = re.search(r"^UV_VERSION := (\S+)$", makefile, re.MULTILINE).group(1)
    assert f"ARG UV_VERSION={uv_version}" in instructions
    runs = " && ".join(line for line in instructions if line.startswith("RUN "))
    assert "--require-hashes --compile-bytecode -r requirements-runtime.lock" in runs
    assert runs.index("-r requirements-runtime.lock") < runs.index("--no-deps -e .")
    cmd = json.loads(next(line for line in instructions if line.startswith("CMD ")).removeprefix("CMD "))
    assert cmd[:3] == ["dagster", "code-server", "start"] and cmd[cmd.index("-p") + 1] == str(PORT)
    assert cmd[cmd.index("-m") + 1] == "ragspine_pipeline.definitions"
    assert f"EXPOSE {PORT}" in instructions
    assert json.dumps(HEALTH_CHECK) in text
    copied = [part for line in instructions if line.startswith("COPY ") for part in line.split()[1:-1]]
    kept = (K8S / "Dockerfile.dockerignore").read_text("utf-8").splitlines()
    for source in copied:  # whatever the image copies, the ignore file lets into the build context
        assert f"!{source}" in kept, source
        assert (ROOT / source).exists(), source


def test_the_setup_job_sets_every_pool_before_checking():
    [job] = documents(K8S / "manifests" / "setup-job.yaml")
    [container] = job["spec"]["template"]["spec"]["containers"]
    script = container["command"][-1]
    for pool in POOLS:
        assert f"dagster instance concurrency set {pool} 1" in script
    assert script.rstrip().endswith("ragspine-eval deploy check")
