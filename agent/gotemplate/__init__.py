"""Go's text/template with consul-template's functions, in pure Python: the template language of
Nomad job templates. No I/O: data-backed functions read through a caller-supplied `DataSource`.

    tpl = parse(text, name="secrets/cert.pem")                   # TemplateSyntaxError
    out = tpl.execute(data, funcs=consul_functions(source))      # TemplateExecError
    function_calls(tpl)                                          # [Call(name, args, line, col)]
"""

from __future__ import annotations

from agent.gotemplate.consul import REFUSED_FUNCTIONS, DataSource, consul_functions
from agent.gotemplate.errors import TemplateError, TemplateExecError, TemplateSyntaxError
from agent.gotemplate.template import DEFAULT_MAX_STEPS, Call, Template, function_calls, parse

__all__ = [
    "DEFAULT_MAX_STEPS",
    "REFUSED_FUNCTIONS",
    "Call",
    "DataSource",
    "Template",
    "TemplateError",
    "TemplateExecError",
    "TemplateSyntaxError",
    "consul_functions",
    "function_calls",
    "parse",
]
