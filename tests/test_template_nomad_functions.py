"""Nomad's template functions (nomadVar, nomadVarExists, nomadVarList, nomadVarListSafe,
nomadService, nomadServices) rendered by the real render worker from a task's view of this node's
state (agent.templates.nomadfuncs), in consul-template's shapes (dependency/nomad_var_structs.go,
nomad_service.go, nomad_services.go); and accepted at submission now that the agent serves them."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.structs.model import Template
from agent.templates.errors import TemplateRenderError
from agent.templates.nomadfuncs import NomadView, Workload, fingerprint, readable_paths
from agent.templates.render import RenderContext, check_template, render

APP = Workload("app", "g", "t")
CREATED = 1_700_000_000_123_456_789  # ns


def variable(path: str, items: Mapping[str, str], modify: int = 7) -> dict[str, Any]:
    return {
        "Namespace": "default",
        "Path": path,
        "CreateIndex": 5,
        "ModifyIndex": modify,
        "CreateTime": CREATED,
        "ModifyTime": CREATED + 10**9,
        "Items": dict(items),
    }


def registration(
    alloc: str, name: str, port: int, tags: list[str] | None, job: str = "app"
) -> dict[str, Any]:
    return {
        "ID": f"_nomad-task-{alloc}-group-{name}-http",
        "ServiceName": name,
        "Namespace": "default",
        "NodeID": "node-1",
        "Datacenter": "dc1",
        "JobID": job,
        "AllocID": alloc,
        "Tags": tags,
        "Address": "10.0.0.1",
        "Port": port,
        "CreateIndex": 1,
        "ModifyIndex": 1,
    }


VARIABLES = {
    "nomad/jobs": variable("nomad/jobs", {"shared": "for-every-job"}),
    "nomad/jobs/app": variable("nomad/jobs/app", {"password": "s3cr3t-pass", "user": "bob"}),
    "nomad/jobs/app/g/t": variable("nomad/jobs/app/g/t", {"flag": "on"}),
}
SERVICES = (
    registration("a1", "web", 8080, ["blue", "v1"]),
    registration("a2", "web", 8081, ["green"]),
    registration("a3", "web", 8082, None),
    registration("a4", "db", 5432, ["primary"], job="data"),
)
VIEW = NomadView(APP, VARIABLES, SERVICES)


def run(tmp_path: Path, text: str, view: NomadView | None = VIEW) -> str:
    render(Template("local/out", data=text), tmp_path, RenderContext({}, nomad=view))
    return (tmp_path / "local/out").read_text()


def fails(tmp_path: Path, text: str, view: NomadView | None = VIEW) -> str:
    with pytest.raises(TemplateRenderError) as err:
        render(Template("local/out", data=text), tmp_path, RenderContext({}, nomad=view))
    return str(err.value)


# -- nomadVar -----------------------------------------------------------------------------------------


def test_nomad_var_items_as_nomads_documentation_uses_them(tmp_path: Path) -> None:
    text = '{{ with nomadVar "nomad/jobs/app" }}user={{ .user }} password={{ .password }}{{ end }}'
    assert run(tmp_path, text) == "user=bob password=s3cr3t-pass"
    text = '{{ range $k, $v := nomadVar "nomad/jobs/app" }}{{ $k }}={{ $v }};{{ end }}'
    assert run(tmp_path, text) == "password=s3cr3t-pass;user=bob;"  # in key order
    assert run(tmp_path, '{{ with nomadVar "nomad/jobs/app" }}{{ .nope }}{{ end }}') == "<no value>"


def test_nomad_var_items_have_consul_templates_methods(tmp_path: Path) -> None:
    v = '{{ $v := nomadVar "nomad/jobs/app" }}'
    assert run(tmp_path, v + "{{ $v.Keys }} {{ $v.Values }}") == "[password user] [s3cr3t-pass bob]"
    assert (
        run(tmp_path, v + "{{ range $v.Tuples }}{{ .K }}:{{ .V }},{{ end }}")
        == "password:s3cr3t-pass,user:bob,"
    )
    assert run(tmp_path, v + "{{ $v.Metadata }} {{ $v.Metadata.ModifyIndex }}") == "nomad/jobs/app 7"
    assert run(tmp_path, v + "{{ $v.Parent.Path }} {{ $v.Parent.Namespace }}") == "nomad/jobs/app default"
    assert run(tmp_path, v + "{{ $v.user.Key }}={{ $v.user.Value }} {{ $v.user.Parent.Path }}") == (
        "user=bob nomad/jobs/app"
    )
    assert run(tmp_path, v + "{{ toJSON $v }}") == '{"password":"s3cr3t-pass","user":"bob"}'
    assert run(tmp_path, v + "{{ $v }}") == "map[password:s3cr3t-pass user:bob]"
    assert run(tmp_path, v + "{{ len $v }} {{ $v.ItemsMap.user }}") == "2 bob"
    # nanoTime prints as Go's time.Time.String in the local zone, to the nanosecond
    created = run(tmp_path, v + "{{ $v.Metadata.CreateTime }}")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.123456789 [+-]\d{4} \S+", created), created
    assert run(tmp_path, v + "{{ toJSON $v.Metadata }}") == (
        '{"Namespace":"default","Path":"nomad/jobs/app","CreateIndex":5,"ModifyIndex":7,'
        f'"CreateTime":{CREATED},"ModifyTime":{CREATED + 10**9}}}'
    )


def test_nomad_var_of_an_empty_path_is_empty_and_a_missing_one_fails_the_render(tmp_path: Path) -> None:
    assert run(tmp_path, '{{ with nomadVar "" }}x{{ else }}none{{ end }}') == "none"
    msg = fails(tmp_path, '{{ with nomadVar "nomad/jobs/app/g" }}{{ .x }}{{ end }}')
    assert "error calling nomadVar: Missing: nomad.var.block(nomad/jobs/app/g@default.global)" in msg
    # the leading and trailing slashes of the path are trimmed, as consul-template does
    assert run(tmp_path, '{{ with nomadVar "/nomad/jobs/app/" }}{{ .user }}{{ end }}') == "bob"
    assert run(tmp_path, '{{ with nomadVar "nomad/jobs/app@default.global" }}{{ .user }}{{ end }}') == "bob"
    msg = fails(tmp_path, '{{ nomadVar "nomad/jobs/app@default.eu" }}')
    assert "No path to region" in msg


def test_nomad_var_exists(tmp_path: Path) -> None:
    text = '{{ nomadVarExists "nomad/jobs/app" }} {{ nomadVarExists "nomad/jobs/app/g" }} '
    text += '{{ nomadVarExists "" }}'
    assert run(tmp_path, text) == "true false false"


# -- nomadVarList -------------------------------------------------------------------------------------


def test_nomad_var_list_gives_variable_metadata_sorted_by_path(tmp_path: Path) -> None:
    assert (
        run(tmp_path, "{{ range nomadVarList }}{{ . }}|{{ end }}")
        == "nomad/jobs|nomad/jobs/app|nomad/jobs/app/g/t|"
    )
    assert run(
        tmp_path, '{{ range nomadVarList "nomad/jobs/" }}{{ .Path }}@{{ .ModifyIndex }} {{ end }}'
    ) == ("nomad/jobs/app@7 nomad/jobs/app/g/t@7 ")
    assert run(tmp_path, '{{ nomadVarList "/nomad/jobs/app/g" | len }}') == "1"  # a leading / is dropped
    assert run(tmp_path, '{{ nomadVarList "zzz" | len }}') == "0"
    msg = fails(tmp_path, '{{ nomadVarList "a" "b" }}')
    assert 'nomadVarList takes either a single "prefix" parameter or none' in msg


def test_nomad_var_list_safe_refuses_to_render_an_empty_list(tmp_path: Path) -> None:
    assert run(tmp_path, '{{ range nomadVarListSafe "nomad/jobs/app" }}{{ .Path }} {{ end }}') == (
        "nomad/jobs/app nomad/jobs/app/g/t "
    )
    msg = fails(tmp_path, '{{ range nomadVarListSafe "nomad/jobs/zzz" }}{{ end }}')
    assert 'no variables under "nomad/jobs/zzz": refusing to render' in msg


# -- nomadService, nomadServices ------------------------------------------------------------------------


def test_nomad_service_instances(tmp_path: Path) -> None:
    text = '{{ range nomadService "web" }}{{ .Address }}:{{ .Port }} {{ .Tags }} {{ .Node }} {{ .AllocID }}|'
    text += "{{ end }}"
    assert run(tmp_path, text) == (
        "10.0.0.1:8080 [blue v1] node-1 a1|10.0.0.1:8081 [green] node-1 a2|10.0.0.1:8082 [] node-1 a3|"
    )
    one = '{{ range nomadService "db" }}{{ .ID }} {{ .Name }} {{ .JobID }} {{ .Datacenter }}{{ end }}'
    assert run(tmp_path, one) == "_nomad-task-a4-group-db-http db data dc1"
    assert run(tmp_path, '{{ range nomadService "green.web" }}{{ .Port }}{{ end }}') == "8081"
    assert run(tmp_path, '{{ nomadService "red.web" | len }} {{ nomadService "nope" | len }}') == "0 0"
    assert (
        run(tmp_path, '{{ range $tag, $s := nomadService "web" | byTag }}{{ $tag }} {{ end }}')
        == "blue green v1 "
    )
    assert "nomad.service: invalid format" in fails(tmp_path, '{{ nomadService "a b" }}')
    assert "No path to region" in fails(tmp_path, '{{ nomadService "web@eu-west" }}')
    assert "expected arguments <service> or <count> <key> <service>" in fails(
        tmp_path, '{{ nomadService "a" "b" }}'
    )
    assert "expected integer for <count> argument" in fails(tmp_path, '{{ nomadService "2" "k" "web" }}')


def _rendezvous(services: list[dict[str, Any]], key: str) -> list[int]:
    """Nomad's HashWith restated: sha256(port as 8 bytes, alloc ID, ID, namespace, address, name,
    tags, key); the smallest hashes first."""

    def h(s: dict[str, Any]) -> str:
        parts = [
            s["AllocID"],
            s["ID"],
            s["Namespace"],
            s["Address"],
            s["ServiceName"],
            *(s["Tags"] or []),
            key,
        ]
        return hashlib.sha256(s["Port"].to_bytes(8, "big") + "".join(parts).encode()).hexdigest()

    return [s["Port"] for s in sorted(services, key=h)]


def test_nomad_service_chooses_instances_by_rendezvous_hashing(tmp_path: Path) -> None:
    web = [s for s in SERVICES if s["ServiceName"] == "web"]
    for key in ("alloc-1", "alloc-2", "another-key"):
        want = _rendezvous(web, key)
        got = run(tmp_path, f'{{{{ range nomadService 2 "{key}" "web" }}}}{{{{ .Port }}}} {{{{ end }}}}')
        assert got.split() == [str(p) for p in want[:2]], key
        everything = run(
            tmp_path, f'{{{{ range nomadService 9 "{key}" "web" }}}}{{{{ .Port }}}} {{{{ end }}}}'
        )
        assert everything.split() == [str(p) for p in want]
    assert run(tmp_path, '{{ nomadService 0 "k" "web" | len }}') == "0"
    assert "choose must be in form" in fails(tmp_path, '{{ nomadService 1 "" "web" }}')


def test_nomad_services_lists_names_with_their_tags(tmp_path: Path) -> None:
    text = "{{ range nomadServices }}{{ .Name }}={{ .Tags }};{{ end }}"
    assert run(tmp_path, text) == "db=[primary];web=[blue green v1];"
    assert run(tmp_path, '{{ nomadServices "@global" | len }}') == "2"
    assert "nomad.services: invalid format" in fails(tmp_path, '{{ nomadServices "web" }}')


def test_without_a_view_the_functions_fail_the_render(tmp_path: Path) -> None:
    assert "no Nomad variables or services for this task" in fails(tmp_path, '{{ nomadVar "x" }}', view=None)


# -- at submission, and what the watch compares ---------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        '{{ with nomadVar "nomad/jobs/x" }}{{ .a }}{{ end }}',
        '{{ range nomadVarList "nomad/jobs" }}{{ .Path }}{{ end }}{{ nomadVarExists "x" }}',
        '{{ nomadVarListSafe }}{{ nomadVarListSafe "nomad/jobs" }}',
        '{{ range nomadService "web" }}{{ .Address }}{{ end }}{{ nomadService 2 "k" "web" }}',
        "{{ nomadServices }}{{ range nomadServices }}{{ .Name }}{{ end }}",
    ],
)
def test_the_nomad_functions_are_accepted_at_submission(data: str) -> None:
    assert check_template(Template("local/x", data=data)) is None


def test_plugin_and_write_to_file_are_still_refused_at_submission() -> None:
    for data, name in (
        ('{{ plugin "p" }}', "plugin"),
        ('{{ writeToFile "/x" "" "" "0644" "a" }}', "writeToFile"),
    ):
        assert f"function {name} is not run by fieldlab-agent" in str(
            check_template(Template("local/x", data=data))
        )


def test_the_fingerprint_follows_what_the_templates_see() -> None:
    moved = NomadView(APP, VARIABLES, tuple({**s, "ModifyIndex": 99} for s in SERVICES))
    assert fingerprint(moved, {"services", "service:web"}) == fingerprint(VIEW, {"services", "service:web"})
    fewer = NomadView(APP, VARIABLES, SERVICES[1:])
    assert fingerprint(fewer, {"service:web"}) != fingerprint(VIEW, {"service:web"})
    assert fingerprint(fewer, {"service:db", "var"}) == fingerprint(VIEW, {"service:db", "var"})
    written = NomadView(
        APP, {**VARIABLES, "nomad/jobs/app": variable("nomad/jobs/app", {"user": "eve"}, 8)}, SERVICES
    )
    assert fingerprint(written, {"var"}) != fingerprint(VIEW, {"var"})
    assert set(VARIABLES) <= readable_paths(APP)
