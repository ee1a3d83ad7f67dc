"""Render time of one task's templates through the agent's renderer (the sandbox, the worker, the
function calls), 1 and 100 templates, p50/p99 per pass. No Vault: a fixed in-process secret source.
Works with either engine: Go templates (agent.gotemplate) or the Jinja2 renderer it replaced."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[1]))

from agent.structs.model import Template
from agent.templates import render as R

GO = hasattr(R, "KNOWN_FUNCTIONS")
PASSES = 30


class Source:
    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        return {
            "certificate": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
            "serial_number": "1a:2b",
            "ca_chain": ["a", "b"],
        }, 0.0

    def list_keys(self, path: str) -> list[str]:
        return []


def text(i: int) -> str:
    if GO:
        return (
            '{{ with secret "pki_int/issue/web" "common_name=tN.service.fieldlab" }}'
            "{{ .Data.certificate }}\nserial={{ .Data.serial_number }}\n"
            "{{ range $i, $c := .Data.ca_chain }}{{ $i }}={{ $c }}\n{{ end }}{{ end }}"
            'port={{ env "NOMAD_PORT_http" }}\n'
        ).replace("tN.", f"t{i}.")
    return (
        "{% set s = secret('pki_int/issue/web', common_name='tN.service.fieldlab') %}"
        "{{ s.certificate }}\nserial={{ s.serial_number }}\n"
        "{% for c in s.ca_chain %}{{ loop.index0 }}={{ c }}\n{% endfor %}"
        "port={{ env('NOMAD_PORT_http') }}\n"
    ).replace("tN.", f"t{i}.")


def main() -> None:
    print(f"engine: {'go text/template (agent.gotemplate)' if GO else 'jinja2'}")
    with tempfile.TemporaryDirectory() as tmp:
        task = Path(tmp) / "t"
        for d in ("local", "secrets"):
            (task / d).mkdir(parents=True)
        for n in (1, 100):
            tpls = [Template(f"secrets/t{i}", data=text(i)) for i in range(n)]
            times = []
            for _ in range(PASSES):
                ctx = R.RenderContext({"NOMAD_PORT_http": "8080"}, vault=Source())
                t0 = time.perf_counter()
                for tpl in tpls:
                    R.render(tpl, task, ctx)
                times.append(time.perf_counter() - t0)
            times.sort()
            p50 = statistics.median(times)
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            print(
                f"{n:>3} template(s) per pass: p50 {p50 * 1000:8.2f} ms  p99 {p99 * 1000:8.2f} ms "
                f"({p50 / n * 1000:.3f} ms per template)"
            )


if __name__ == "__main__":
    main()
