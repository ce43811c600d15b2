"""The spark-submit commands the DAG's land and apply tasks run, built by the Spark provider's own hook.

Run in a fresh interpreter (Airflow reads its settings at import), with the Airflow worker's
environment: the pipelines folder, the Spark connection, the deploy settings
(``TIDELAKE_PY_FILES``, ``TIDELAKE_SPARK_PROPERTIES``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import datetime as dt, json, sys
from airflow.dag_processing.dagbag import DagBag
dag_id, start, end = sys.argv[1], dt.datetime.fromisoformat(sys.argv[2]), dt.datetime.fromisoformat(sys.argv[3])
bag = DagBag(dag_folder=sys.argv[4])
assert not bag.import_errors, bag.import_errors
dag = bag.dags[dag_id]
out = {}
for task_id in ("land", "apply"):
    op = dag.task_dict[task_id]
    # What the task runner renders before execute() for a scheduled run: its logical date, interval and params.
    op.render_template_fields({"logical_date": start, "data_interval_start": start, "data_interval_end": end, "dag": dag,
                               "run_id": f"scheduled__{start.isoformat()}", "params": {k: dag.params[k] for k in dag.params}})
    hook = op._get_hook()
    out[task_id] = {"argv": hook._build_spark_submit_command(op.application), "env": hook._env}
print(json.dumps(out))
"""


def submit_commands(pipelines: Path, dag_id: str, start: dt.datetime, end: dt.datetime,
                    env: Mapping[str, str]) -> dict[str, dict]:
    """``{"land": {"argv": [...], "env": ...}, "apply": ...}`` as the DAG's operators would submit them."""
    airflow_home = Path(env.get("AIRFLOW_HOME", "/tmp/tidelake-airflow-deploy"))
    full_env = {**os.environ, "AIRFLOW_HOME": str(airflow_home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "TIDELAKE_PIPELINES": str(pipelines.resolve()), **env}
    proc = subprocess.run([sys.executable, "-c", _PROBE, dag_id, start.isoformat(), end.isoformat(), str(REPO / "dags")],
                          cwd=REPO, env=full_env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"building the spark-submit commands failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def documented_build_commands() -> list[str]:
    """The commands deploy/README.md ("Images") gives to build the wheel and the code archive, as written."""
    readme = (REPO / "deploy" / "README.md").read_text()
    block = readme[readme.index("## Images"):].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def build_code_archive(dest: Path) -> Path:
    """The code archive for ``--py-files``, built by deploy/README.md's commands ("Images") in a clean copy of the repo.

    A clean copy: setuptools reuses a ``build/`` folder left in a working tree, which can put
    modules deleted since into the wheel. ``python`` in the commands is this interpreter.
    Returns ``dest/src/dist/tidelake-<version>.zip``; the wheel is beside it.
    """
    import shutil

    source = dest / "src"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in listed.stdout.splitlines():
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    shims = dest / "bin"
    shims.mkdir(parents=True, exist_ok=True)
    (shims / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command in documented_build_commands():
        built = subprocess.run(["bash", "-c", command], cwd=source, env=env, capture_output=True, text=True, timeout=600,
                               check=False)
        if built.returncode != 0:
            raise AssertionError(f"{command} failed:\n{built.stdout[-2000:]}\n{built.stderr[-2000:]}")
    (wheel,) = (source / "dist").glob("tidelake-*-py3-none-any.whl")
    version = wheel.name.split("-")[1]
    archive = source / "dist" / f"tidelake-{version}.zip"
    assert archive.is_file(), f"the documented commands made no {archive.name}"
    return archive
