"""Whether a chat template takes message content as a string or as OpenAI parts.

vLLM's ``--chat-template-content-format auto`` parses the template's Jinja AST and
answers "openai" when some loop iterates over a message's ``content`` (directly, via
an alias or a macro parameter), else "string". This is a port of that detection
from vLLM 0.33 (``vllm/renderers/hf.py``, Apache-2.0, the vLLM project), so the
router renders content parts the way the server does for the same template.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

import jinja2
import jinja2.nodes
import jinja2.sandbox

from pdserve.tokenization.chat_messages import ContentFormat


def _is_var_access(node: jinja2.nodes.Node, varname: str) -> bool:
    if isinstance(node, jinja2.nodes.Name):
        return node.ctx == "load" and node.name == varname

    # `ns.rest` matches the dotted alias "ns.rest".
    if isinstance(node, jinja2.nodes.Getattr) and "." in varname:
        base, _, attr = varname.rpartition(".")
        return node.attr == attr and _is_var_access(node.node, base)

    return False


def _is_attr_access(node: jinja2.nodes.Node, varname: str, key: str) -> bool:
    if isinstance(node, jinja2.nodes.Getitem):
        return (
            _is_var_access(node.node, varname)
            and isinstance(node.arg, jinja2.nodes.Const)
            and node.arg.value == key
        )

    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var_access(node.node, varname) and node.attr == key

    return False


def _is_var_or_elems_access(
    node: jinja2.nodes.Node,
    varname: str,
    key: str | None = None,
) -> bool:
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems_access(
            node.node, varname, key
        )
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems_access(node.node, varname, key)

    if isinstance(node, jinja2.nodes.Getitem) and isinstance(
        node.arg, jinja2.nodes.Slice
    ):
        return _is_var_or_elems_access(node.node, varname, key)

    return _is_attr_access(node, varname, key) if key else _is_var_access(node, varname)


def _attr_dotted_name(node: jinja2.nodes.Node) -> str | None:
    """Render an attribute-assignment target like ``ns.rest`` as a dotted name."""
    if isinstance(node, jinja2.nodes.NSRef):
        return f"{node.name}.{node.attr}"
    parts = []
    while isinstance(node, jinja2.nodes.Getattr):
        parts.append(node.attr)
        node = node.node
    if isinstance(node, jinja2.nodes.Name):
        parts.append(node.name)
        return ".".join(reversed(parts))
    return None


def _iter_nodes_assign_var_or_elems(root: jinja2.nodes.Node, varname: str):
    # Global variable that is implicitly defined at the root
    yield root, varname

    # Iterative BFS
    seen = {varname}
    related_varnames = deque([varname])
    while related_varnames:
        related_varname = related_varnames.popleft()

        for assign_ast in root.find_all(jinja2.nodes.Assign):
            lhs = assign_ast.target
            rhs = assign_ast.node

            if isinstance(lhs, jinja2.nodes.Name) and _is_var_or_elems_access(
                rhs, related_varname
            ):
                yield assign_ast, lhs.name

                # Avoid infinite looping for self-assignment
                if lhs.name != related_varname and lhs.name not in seen:
                    seen.add(lhs.name)
                    related_varnames.append(lhs.name)

            # Namespace aliases: `namespace(rest=messages)` or `ns.rest = messages`.
            aliases: list[str] = []
            if (
                isinstance(lhs, jinja2.nodes.Name)
                and isinstance(rhs, jinja2.nodes.Call)
                and isinstance(rhs.node, jinja2.nodes.Name)
                and rhs.node.name == "namespace"
            ):
                aliases = [
                    f"{lhs.name}.{kwarg.key}"
                    for kwarg in rhs.kwargs
                    if _is_var_or_elems_access(kwarg.value, related_varname)
                ]
            elif isinstance(
                lhs, (jinja2.nodes.Getattr, jinja2.nodes.NSRef)
            ) and _is_var_or_elems_access(rhs, related_varname):
                dotted = _attr_dotted_name(lhs)
                aliases = [dotted] if dotted is not None else []

            for alias in aliases:
                yield assign_ast, alias
                if alias != related_varname and alias not in seen:
                    seen.add(alias)
                    related_varnames.append(alias)


# NOTE: The proper way to handle this is to build a CFG so that we can handle
# the scope in which each variable is defined, but that is too complicated
def _iter_nodes_assign_messages_item(root: jinja2.nodes.Node):
    messages_varnames = [
        varname for _, varname in _iter_nodes_assign_var_or_elems(root, "messages")
    ]

    # Search for {%- for message in messages -%} loops
    for loop_ast in root.find_all(jinja2.nodes.For):
        loop_iter = loop_ast.iter
        loop_target = loop_ast.target

        for varname in messages_varnames:
            if _is_var_or_elems_access(loop_iter, varname):
                assert isinstance(loop_target, jinja2.nodes.Name)
                yield loop_ast, loop_target.name
                break


def _iter_nodes_assign_content_item(root: jinja2.nodes.Node):
    """Yield loops that iterate over message content or macro-bound content."""
    message_varnames = [
        varname for _, varname in _iter_nodes_assign_messages_item(root)
    ]

    # Track macro parameters that receive message.content as an argument.
    # Some templates pass message.content through a macro parameter whose
    # name is not literally "content".
    macro_content_params_by_loop: dict[int, set[str]] = {}
    loops_in_macros: set[int] = set()
    for macro_node in root.find_all(jinja2.nodes.Macro):
        macro_param_names = {arg.name for arg in macro_node.args}
        macro_content_params: set[str] = set()
        for call_node in root.find_all(jinja2.nodes.Call):
            if (
                isinstance(call_node.node, jinja2.nodes.Name)
                and call_node.node.name == macro_node.name
            ):
                for i, arg in enumerate(call_node.args):
                    if i < len(macro_node.args) and any(
                        _is_var_or_elems_access(arg, varname, "content")
                        for varname in message_varnames
                    ):
                        macro_content_params.add(macro_node.args[i].name)
                for kwarg in call_node.kwargs:
                    if (
                        isinstance(kwarg, jinja2.nodes.Keyword)
                        and kwarg.key in macro_param_names
                        and any(
                            _is_var_or_elems_access(kwarg.value, varname, "content")
                            for varname in message_varnames
                        )
                    ):
                        macro_content_params.add(kwarg.key)

        for loop_ast in macro_node.find_all(jinja2.nodes.For):
            loops_in_macros.add(id(loop_ast))
            if macro_content_params:
                macro_content_params_by_loop[id(loop_ast)] = macro_content_params

    # Search for {%- for content in message['content'] -%} loops
    # or {%- for item in content -%} loops
    for loop_ast in root.find_all(jinja2.nodes.For):
        loop_iter = loop_ast.iter
        loop_target = loop_ast.target

        for varname in message_varnames:
            if _is_var_or_elems_access(loop_iter, varname, "content"):
                assert isinstance(loop_target, jinja2.nodes.Name)
                yield loop_ast, loop_target.name
                break
        else:
            macro_content_params_for_loop = macro_content_params_by_loop.get(
                id(loop_ast)
            )
            if (
                isinstance(loop_iter, jinja2.nodes.Name)
                and macro_content_params_for_loop is not None
                and loop_iter.name in macro_content_params_for_loop
            ):
                assert isinstance(loop_target, jinja2.nodes.Name)
                yield loop_ast, loop_target.name
                continue

            if (
                id(loop_ast) not in loops_in_macros
                and isinstance(loop_iter, jinja2.nodes.Name)
                and loop_iter.name == "content"
            ):
                assert isinstance(loop_target, jinja2.nodes.Name)
                yield loop_ast, loop_target.name




def _parse(chat_template: str) -> jinja2.nodes.Template | None:
    # transformers compiles templates with these options; the AST is what matters.
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        return _compile_jinja_template(chat_template).environment.parse(chat_template)
    except Exception:
        return None


@lru_cache(maxsize=32)
def detect_content_format(chat_template: str, default: ContentFormat = "string") -> ContentFormat:
    ast = _parse(chat_template)
    if ast is None:
        return default
    try:
        next(_iter_nodes_assign_content_item(ast))
    except StopIteration:
        return "string"
    except Exception:
        return default
    return "openai"
