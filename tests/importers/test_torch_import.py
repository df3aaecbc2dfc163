"""PyTorch export: section paths reach exactly the ops produced inside them.

However the program is exported (``sm.torch.export``, plain ``torch.export``,
an ``FxProgramsBuilder``, the user's own ``aot.export`` inside
``sm.torch.sections()``), strict and non-strict, through no_grad regions,
training steps and other threads running sections meanwhile.
"""

import inspect
import re
import sys
import threading
import time
import warnings

import numpy as np
import pytest
import torch
import torch.export.experimental
from iree.turbine import aot

import sectionmark as sm
from sectionmark.errors import SectionmarkError
from sectionmark.importers.torch import retrace
from sectionmark.importers.torch.scope import node_section_path
from sectionmark.markers import frameworks
from sectionmark.locations import section_path
from sectionmark.section_path import LOC_PREFIX

STRICTNESS = pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])

ODD_NAMES = ['quo"te', "back\\slash", "new\nline", "emoji 🤖", "n" * 1000]


class Stack(torch.nn.Module):
    """exp (unmarked) -> 4 x [Block i: sin, MLP: cos] -> tanh (unmarked)."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))

    @sm.section("MLP")
    def mlp(self, x):
        return torch.cos(x)

    def forward(self, x):
        x = torch.exp(x)
        for i in range(4):
            with sm.section(f"Block {i}"):
                x = torch.sin(x * self.scale)
                x = self.mlp(x)
        return torch.tanh(x)


class Unmarked(torch.nn.Module):
    """`Stack` without its sections."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))

    def forward(self, x):
        x = torch.exp(x)
        for _ in range(4):
            x = torch.cos(torch.sin(x * self.scale))
        return torch.tanh(x)


STACK_BLOCKS = [(f"Block {i}",) for i in range(4)]
STACK_SECTIONS = set(STACK_BLOCKS) | {block + ("MLP",) for block in STACK_BLOCKS}


def operations(module):
    """Every operation of an MLIR module, in program order (nested ones after their parent)."""

    def visit(operation):
        for region in operation.regions:
            for block in region.blocks:
                for op in block.operations:
                    yield op.operation
                    yield from visit(op.operation)

    return list(visit(module.operation))


def op_paths(module, op_name):
    """Section path of every op called ``op_name``, in program order."""
    return [section_path(str(op.location)) for op in operations(module) if op.name == op_name]


def assert_stack_paths(module, functions=1):
    assert op_paths(module, "torch.aten.sin") == STACK_BLOCKS * functions
    assert op_paths(module, "torch.aten.cos") == [block + ("MLP",) for block in STACK_BLOCKS] * functions
    assert op_paths(module, "torch.aten.exp") == [None] * functions
    assert op_paths(module, "torch.aten.tanh") == [None] * functions


@STRICTNESS
def test_every_op_carries_exactly_its_path(strict):
    exported = sm.torch.export(Stack(), args=(torch.randn(4),), strict_export=strict)
    assert_stack_paths(exported.mlir_module)
    assert set(exported.sections) == STACK_SECTIONS


class BadName(torch.nn.Module):
    def forward(self, x):
        with sm.section(""):
            return torch.sin(x)


def test_under_dynamo_sections_warn_nothing_and_a_bad_name_is_its_own_error():
    """The check and key of a section run untraced (assume_constant_result): no side effect for Dynamo to report."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported = sm.torch.export(Stack(), args=(torch.randn(4),))
    assert set(exported.sections) == STACK_SECTIONS
    assert not [warning for warning in caught if "side effects" in str(warning.message)]
    with pytest.raises(ValueError, match="section name must not be empty"):
        sm.torch.export(BadName(), args=(torch.randn(4),))


def test_parameters_and_defaults_are_those_of_aot_export_plus_auto_modules():
    ours = dict(inspect.signature(sm.torch.export).parameters)
    turbines = inspect.signature(aot.export).parameters
    assert ours.pop("auto_modules").default is False
    assert ours.pop("quiet").default is False  # the progress line (sectionmark.progress)

    def described(parameter):  # a positional-only parameter's name is nobody's business
        name = None if parameter.kind is inspect.Parameter.POSITIONAL_ONLY else parameter.name
        return name, parameter.kind, parameter.default

    assert list(map(described, ours.values())) == list(map(described, turbines.values()))
    assert ours["strict_export"].default is True


@STRICTNESS
def test_a_program_exported_with_plain_torch_export_keeps_each_section_apart(strict):
    program = torch.export.export(Stack(), (torch.randn(4),), strict=strict)
    exported = sm.torch.export(program)
    assert_stack_paths(exported.mlir_module)
    assert set(exported.sections) == STACK_SECTIONS


@STRICTNESS
def test_fx_programs_builder_exports_two_functions_with_their_sections(strict):
    builder = aot.FxProgramsBuilder(Stack())
    x = torch.randn(4)

    @builder.export_program(args=(x,), strict=strict)
    def prefill(module, x):
        return module(x)

    @builder.export_program(args=(x,), strict=strict)
    def decode(module, x):
        with sm.section("Decode step"):
            return module(x) * 2

    exported = sm.torch.export(builder)
    functions = [op for op in operations(exported.mlir_module) if op.name == "func.func"]
    assert [str(op.attributes["sym_name"]) for op in functions] == ['"prefill"', '"decode"']
    assert op_paths(functions[0], "torch.aten.sin") == STACK_BLOCKS
    assert op_paths(functions[1], "torch.aten.sin") == [("Decode step",) + block for block in STACK_BLOCKS]
    assert op_paths(functions[1], "torch.aten.mul.Scalar") == [("Decode step",)]


@STRICTNESS
def test_own_aot_export_inside_the_scope_gives_the_same_mlir_as_sm_torch_export(strict):
    model, x = Stack(), torch.randn(4)
    with sm.torch.sections(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = aot.export(model, args=(x,), strict_export=strict)
    theirs = output.mlir_module.get_asm(enable_debug_info=True)
    assert theirs == sm.torch.export(model, args=(x,), strict_export=strict).mlir
    assert_stack_paths(output.mlir_module)


class Rotary(torch.nn.Module):
    """Like HF Llama's rotary embedding: a no_grad forward with an autocast(enabled=False) region."""

    @torch.no_grad()
    def forward(self, x):
        y = torch.sin(x)
        with sm.section("Inner"):
            y = torch.cos(y)
        with torch.autocast("cpu", enabled=False):
            with sm.section("Autocast off"):
                y = torch.sigmoid(y)
        return y


class GradRegions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = Rotary()
        self.weight = torch.nn.Parameter(torch.ones(4))

    def forward(self, x):
        x = x * self.weight
        with sm.section("Outer"):
            x = self.rotary(x) + 1
        with torch.no_grad():
            with sm.section("In no_grad"):
                x = torch.tanh(x)
        with torch.set_grad_enabled(False):
            x = torch.abs(x)
        return torch.exp(x)


@STRICTNESS
def test_sections_inside_and_around_no_grad_and_autocast_regions(strict):
    exported = sm.torch.export(GradRegions(), args=(torch.randn(4),), strict_export=strict)
    module = exported.mlir_module
    assert op_paths(module, "torch.aten.mul.Tensor") == [None]
    assert op_paths(module, "torch.aten.sin") == [("Outer",)]
    assert op_paths(module, "torch.aten.cos") == [("Outer", "Inner")]
    assert op_paths(module, "torch.aten.sigmoid") == [("Outer", "Autocast off")]
    assert op_paths(module, "torch.aten.add.Scalar") == [("Outer",)]
    assert op_paths(module, "torch.aten.tanh") == [("In no_grad",)]
    assert op_paths(module, "torch.aten.abs") == [None]
    assert op_paths(module, "torch.aten.exp") == [None]


def tiny_marked_llama():
    """HF Llama with random weights and sections put on its modules' forwards."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()

    def mark(module, name):
        module.forward = sm.section(name)(module.forward)

    mark(model.model.embed_tokens, "Embedding")
    mark(model.model.rotary_emb, "Rotary")  # a @torch.no_grad() forward
    for index, layer in enumerate(model.model.layers):
        mark(layer, f"Layer {index}")
        mark(layer.self_attn, "Self Attention")
        mark(layer.mlp, "MLP")
    mark(model.lm_head, "LM Head")
    return model


@STRICTNESS
def test_llama_prefill_from_fx_programs_builder_keeps_every_section_in_place(strict):
    model, tokens = tiny_marked_llama(), torch.randint(0, 64, (1, 8))
    with sm.torch.sections():  # FxProgramsBuilder exports (and decomposes) as each function is declared
        builder = aot.FxProgramsBuilder(model)

        @builder.export_program(args=(tokens,), strict=strict)
        def prefill(module, tokens):
            return module(input_ids=tokens, use_cache=False).logits

    exported = sm.torch.export(builder)
    layers = [(f"Layer {index}",) for index in range(2)]
    expected = {("Embedding",), ("Rotary",), ("LM Head",), *layers}
    expected |= {layer + (part,) for layer in layers for part in ("Self Attention", "MLP")}
    assert set(exported.sections) == expected  # nothing nested into the section before it
    assert set(op_paths(exported.mlir_module, "torch.aten.cos")) == {("Rotary",)}
    assert set(op_paths(exported.mlir_module, "torch.aten.sin")) == {("Rotary",)}


OUR_NAMELOC = re.compile(r'loc\("' + re.escape(LOC_PREFIX) + r'(?:[^"\\]|\\.)*"(?:\((.*)\))?\)', re.S)


def without_section(location_text):
    """The location an op has without sectionmark: ours is a NameLoc around it."""
    match = OUR_NAMELOC.fullmatch(location_text)
    if match is None:
        return location_text
    return f"loc({match.group(1)})" if match.group(1) is not None else "loc(unknown)"


GENERATED_CODE_NUMBER = re.compile(r"<eval_with_key>\.\d+")


def locations(module):
    """(op name, location) of every op and block argument.

    Ops of no_grad regions are located in torch's generated code of the region,
    ``<eval_with_key>.N``, numbered process-wide: two plain exports differ there too.
    """
    found = []
    for op in operations(module):
        found.append((op.name, str(op.location)))
        for region in op.regions:
            for block in region.blocks:
                found.extend(("argument", str(argument.location)) for argument in block.arguments)
    return [(name, GENERATED_CODE_NUMBER.sub("<eval_with_key>", text)) for name, text in found]


@pytest.mark.parametrize("model", [Stack, GradRegions])
@STRICTNESS
def test_every_location_is_the_plain_one_wrapped_in_its_section(model, strict):
    model, x = model(), torch.randn(4)
    marked = sm.torch.export(model, args=(x,), strict_export=strict).mlir_module
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = aot.export(model, args=(x,), strict_export=strict).mlir_module  # no scope: hooks installed
    assert locations(plain) == locations(marked)
    unwrapped = [(name, without_section(text)) for name, text in locations(marked)]
    assert not any(LOC_PREFIX in text for _, text in unwrapped)
    assert [name for name, _ in unwrapped] == [name for name, _ in locations(plain)]
    assert any(name.startswith("torch.aten") and LOC_PREFIX in text for name, text in locations(marked))
    assert not any(LOC_PREFIX in text for name, text in locations(marked) if name in ("argument", "func.func"))


class OddNames(torch.nn.Module):
    def forward(self, x):
        for name in ODD_NAMES:
            with sm.section(name):
                x = torch.sin(x)
        with sm.section(ODD_NAMES[0]):
            with sm.section("a/b"):
                x = torch.cos(x)
        return x


def test_odd_names_survive_the_mlir_text_byte_exactly(tmp_path):
    exported = sm.torch.export(OddNames(), args=(torch.randn(3),))
    saved = exported.save_mlir(tmp_path / "odd.mlir")
    from sectionmark.importers.exported import find_sections

    expected = [(name,) for name in ODD_NAMES] + [(ODD_NAMES[0], "a/b")]
    assert list(find_sections(saved.read_text(encoding="utf-8"))) == expected


class Modules(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
        self.head = torch.nn.Linear(4, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        with sm.section("Head"):
            return self.head(x)


def test_auto_modules_names_unmarked_ops_and_explicit_sections_win():
    exported = sm.torch.export(Modules(), args=(torch.randn(2, 4),), auto_modules=True)
    assert set(exported.sections) == {("blocks.0",), ("blocks.1",), ("Head",)}
    plain = sm.torch.export(Modules(), args=(torch.randn(2, 4),))
    assert plain.sections == (("Head",),)


def import_places() -> dict:
    """What the import hooks patch for good once installed: (owner, attribute) -> current value."""
    import torch._functorch.aot_autograd as aot_autograd
    import torch.export.exported_program as exported_program
    from iree.compiler.extras.fx_importer import ContextCache, GraphNodeImporter
    from torch._higher_order_ops.wrap import WrapWithAutocast, WrapWithSetGradEnabled

    places = [(ContextCache, "get_node_location"), (GraphNodeImporter, "import_nodes"),
              (WrapWithSetGradEnabled, "__call__"), (WrapWithAutocast, "__call__"),
              (aot_autograd, "_aot_export_function"),
              (exported_program, "_decompose_and_get_gm_with_new_signature_constants")]
    return {place: getattr(*place) for place in places}


def scope_places() -> dict:
    """What `sm.torch.sections` patches only while open (aot.jittable's trace and the markers' torch probe)."""
    places = [(sys.modules["iree.turbine.aot.builtins.jittable"], "functorch_functionalize"),
              (frameworks.framework("torch"), "tracing")]
    return {place: getattr(*place) for place in places}


def plain_mlir(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return aot.export(model, args=(x,)).mlir_module.get_asm(enable_debug_info=True)


def test_import_hooks_stay_and_scope_hooks_patch_only_while_open_on_any_thread():
    sm.torch.export(Stack(), args=(torch.randn(4),))
    installed, originals = import_places(), scope_places()
    assert all(getattr(value, "__module__", "").startswith("sectionmark.importers.torch.") for value in installed.values())
    assert LOC_PREFIX in plain_mlir(Stack(), torch.randn(4))  # plain aot.export keeps sections, no scope
    assert LOC_PREFIX not in plain_mlir(Unmarked(), torch.randn(4))

    opened, release, failures = threading.Event(), threading.Event(), []

    def hold_a_scope():
        try:
            with sm.torch.sections():
                opened.set()
                release.wait(timeout=60)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)

    holder = threading.Thread(target=hold_a_scope)
    holder.start()
    assert opened.wait(timeout=60)
    try:
        patched = scope_places()
        assert all(patched[place] is not originals[place] for place in originals)
        with sm.torch.sections():  # overlapping scopes: the originals come back only after both
            assert LOC_PREFIX in plain_mlir(Stack(), torch.randn(4))
        assert scope_places() == patched
    finally:
        release.set()
        holder.join()
    assert not failures
    assert scope_places() == originals
    assert import_places() == installed


def test_only_the_exporting_thread_sections_reach_the_graph():
    """20 exports (strict and non-strict) while 4 threads run eager sections without pause."""
    stop, failures, entries = threading.Event(), [], [0] * 4

    def eager_sections(index):
        try:
            while not stop.is_set():
                with sm.section(f"NOISE-{index}"), sm.section("Block 0"), sm.section("MLP"):
                    entries[index] += 1
                time.sleep(0.0002)  # lets the exporting thread run between entries
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=eager_sections, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    try:
        found = [set(sm.torch.export(Stack(), args=(torch.randn(4),), strict_export=n % 2 == 0).sections)
                 for n in range(20)]
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not failures
    assert all(count > 100 for count in entries)  # they really ran during the exports
    assert [sections == STACK_SECTIONS for sections in found] == [True] * 20


class TrainStep(torch.nn.Module):
    """A tiny MLP returning its loss: what torch's joint forward+backward export takes."""

    def __init__(self):
        super().__init__()
        self.hidden, self.head = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

    def forward(self, x, target):
        with sm.section("Hidden"):
            h = torch.relu(self.hidden(x))
        with sm.section("Head"):
            out = self.head(h)
        return (torch.nn.functional.mse_loss(out, target),)


@STRICTNESS
def test_training_step_keeps_forward_sections_and_names_backward_ops(strict):
    import iree.compiler

    model, x, target = TrainStep(), torch.randn(3, 4), torch.randn(3, 2)
    exported = sm.torch.export_training_step(model, args=(x, target), strict_export=strict)
    hidden_back, head_back = ("Hidden (backward)",), ("Head (backward)",)
    assert op_paths(exported.mlir_module, "torch.aten.addmm") == [("Hidden",), ("Head",)]
    assert op_paths(exported.mlir_module, "torch.aten.relu") == [("Hidden",)]
    assert op_paths(exported.mlir_module, "torch.aten.mm") == [head_back, head_back, hidden_back]
    assert op_paths(exported.mlir_module, "torch.aten.where.self") == [hidden_back]  # relu's gradient
    assert op_paths(exported.mlir_module, "torch.aten.mean") == [None]  # the loss is in no section
    assert set(exported.sections) == {("Hidden",), ("Head",), hidden_back, head_back}

    vmfb = iree.compiler.compile_str(exported.mlir, target_backends=["llvm-cpu"], input_type="torch")
    loss, *gradients = (value.to_host() for value in sm.load(vmfb).main(x.numpy(), target.numpy()))
    expected_loss = model(x, target)[0]
    expected_loss.backward()
    np.testing.assert_allclose(loss, expected_loss.detach().numpy(), rtol=1e-5, atol=1e-6)
    expected_gradients = [parameter.grad.numpy() for parameter in model.parameters()]
    assert len(gradients) == len(expected_gradients) == 4
    for gradient, expected in zip(gradients, expected_gradients):
        np.testing.assert_allclose(gradient, expected, rtol=1e-5, atol=1e-6)


def test_a_loss_that_is_no_scalar_is_one_clear_error():
    with pytest.raises(SectionmarkError, match="cannot export the training step of Stack: .*scalar"):
        sm.torch.export_training_step(Stack(), args=(torch.randn(4),))


def traced_graph_with_sections():
    """A graph whose ``sin`` node is in "A" (forward) and whose ``cos`` node is its backward."""
    traced = torch.fx.symbolic_trace(lambda x: torch.cos(torch.sin(x)))
    sin, cos = [node for node in traced.graph.nodes if node.op == "call_function"]
    sin.meta["custom"] = {"sectionmark#1": "A", "other tool": 1}
    cos.meta.update(custom={"sectionmark#1": "A"}, partitioner_tag="is_backward")
    return traced


def generated_code_lines(module):
    """Node name -> the line of the module's generated code that runs it."""
    first_line, nodes = type(module).forward.__code__.co_firstlineno, list(module.graph.nodes)
    return {nodes[index].name: first_line + line for line, index in module._lineno_map.items() if index is not None}


def test_retraced_ops_get_the_sections_of_the_generated_code_line_they_name():
    traced = traced_graph_with_sections()
    code, lines = retrace.TracedCode(traced), generated_code_lines(traced)
    retraced = torch.fx.symbolic_trace(lambda x: torch.cos(torch.sin(x)))
    for node in retraced.graph.nodes:
        if node.op == "call_function":  # outer frames first; the innermost one ran the op
            other = "cos" if node.name == "sin" else "sin"
            node.stack_trace = (f'File "model.py", line 7, in forward\n    y = step(x)\n'
                                f'File "{code.filename}", line {lines[other]}, in forward\n    ...\n'
                                f'File "{code.filename}", line {lines[node.name]}, in forward\n    ...')
    retrace.carry_sections(retraced, {code.filename: code})
    paths = {node.name: node_section_path(node) for node in retraced.graph.nodes}
    assert paths == {"x": None, "sin": ("A",), "cos": ("A (backward)",), "output": None}


def test_a_retrace_without_stack_traces_warns_that_its_ops_are_unmarked():
    code = retrace.TracedCode(traced_graph_with_sections())
    retraced = torch.fx.symbolic_trace(lambda x: torch.cos(torch.sin(x)))
    with pytest.warns(RuntimeWarning, match="cannot follow"):
        retrace.carry_sections(retraced, {code.filename: code})
    assert not any(node_section_path(node) for node in retraced.graph.nodes)


def test_a_training_step_made_with_plain_torch_keeps_its_sections_without_a_warning():
    args = (torch.randn(3, 4), torch.randn(3, 2))
    program = torch.export.export(TrainStep(), args)
    joint = torch.export.experimental._export_forward_backward(program)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported = sm.torch.export(joint)
    assert not [warning for warning in caught if "sectionmark" in str(warning.message)]
    assert set(exported.sections) == set(sm.torch.export_training_step(TrainStep(), args).sections)
    assert ("Hidden (backward)",) in exported.sections


def test_what_sm_torch_export_cannot_take_is_one_clear_error():
    with pytest.raises(SectionmarkError, match="nn.Module, a torch.export.ExportedProgram, .* or a CompiledModule "
                       "class, got function"):
        sm.torch.export(lambda x: x, args=(torch.randn(4),))
    with pytest.raises(SectionmarkError, match="got class Stack"):
        sm.torch.export(Stack, args=(torch.randn(4),))
    program = torch.export.export(Stack(), (torch.randn(4),))
    with pytest.raises(SectionmarkError, match="ExportedProgram was already exported"):
        sm.torch.export(program, args=(torch.randn(4),))
    with pytest.raises(SectionmarkError, match="already exported"):
        sm.torch.export(program, torch.randn(4))


def test_exported_mlir_compiles_for_llvm_cpu_and_runs():
    import iree.compiler

    model, x = Stack(), torch.randn(4)
    exported = sm.torch.export(model, args=(x,))
    vmfb = iree.compiler.compile_str(exported.mlir, target_backends=["llvm-cpu"], input_type="torch")
    result = sm.load(vmfb).main(x.numpy()).to_host()
    np.testing.assert_allclose(result, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_non_strict_export_warns_once_per_section_without_ops():
    import warnings

    class Model(torch.nn.Module):
        def forward(self, x):
            with sm.section("Scale"):
                x = x * 2.0
            with sm.section("Nothing"):
                pass
            with sm.section("Outer"):
                with sm.section("Shape only"):
                    _ = x.shape[0]
                x = x + 1.0
            return x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported = sm.torch.export(Model(), args=(torch.ones(4),), strict_export=False)
    messages = [str(warning.message) for warning in caught if str(warning.message).startswith("sectionmark: section")]
    assert messages == [
        "sectionmark: section 'Nothing' produced no ops in the export",
        "sectionmark: section 'Outer / Shape only' produced no ops in the export",
    ]
    assert exported.sections == (("Scale",), ("Outer",))
