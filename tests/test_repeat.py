"""Repeated layers (`(repeat block N)` in `:params`) and rematerialisation (`:remat`).

The checker: stacked parameter shapes, the carry checked from layer to layer
(E-MODEL-004), what cannot be stacked (E-MODEL-005), `:remat` validated. The
runtime: one `lax.scan` over the stacked parameters, the same loss and
gradients as the layers written out by hand, each layer initialised apart;
`jax.checkpoint` under a remat policy gives the same gradients. `explain`:
N layers of FLOPs and parameters, and a smaller training live set under remat.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from runfile import RunFile
from sexpgpu_lang import analyze
from sexpgpu_runtime.lowering.context import make_ctx
from sexpgpu_runtime.lowering.lowering import Effects, run_phase
from sexpgpu_runtime.weights.params import init_params

HEAD = """(def vocab 16)
(def seq 8)
(def dim 8)

(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 4
  :fields (:row [seq] :i32
           :stride [1] :i32))

(defmodel block
  :params (:w (normal [dim dim] :std 0.3)
           :b (normal [dim] :std 0.3))
  :apply (lambda (self h scale)
           (+ h (* scale (tanh (+ (matmul h (getf self :w)) (getf self :b)))))))
"""

REPEATED = HEAD + """
(defmodel student
  :params (:embed (normal [vocab dim] :std 0.3)
           :blocks (repeat block 3{remat})
           :out (normal [dim vocab] :std 0.3))
  :apply (lambda (self row)
           (matmul (block (take (getf self :embed) row) 0.5) (getf self :out))))
"""

TAIL = """
(model student)

(objective (lambda (batch ctx)
  (let* ((logits (model (field batch :row)))
         (loss (mean (cross-entropy logits (mod (+ (field batch :row) (field batch :stride)) vocab)))))
    loss)))

(run :loader train :steps 3 :seed 0 :optimizer (adam :lr 1e-2){run})
"""

# The same model written out layer by layer: three sub-models, one per layer.
UNROLLED = HEAD.replace("(defmodel block", "(defmodel block0").replace(
    ":apply (lambda (self h scale)", ":apply (lambda (self h scale)", 1) + "".join(
    HEAD[HEAD.index("(defmodel block"):].replace("(defmodel block", f"(defmodel block{i}") for i in (1, 2)) + """
(defmodel student
  :params (:embed (normal [vocab dim] :std 0.3)
           :l0 block0 :l1 block1 :l2 block2
           :out (normal [dim vocab] :std 0.3))
  :apply (lambda (self row)
           (matmul (block2 (block1 (block0 (take (getf self :embed) row) 0.5) 0.5) 0.5) (getf self :out))))
"""


def program(text):
    res = analyze(text)
    errors = [d for d in res.diagnostics if d.is_error]
    assert not errors, [(d.code, d.message) for d in errors]
    return res.program


def repeated(remat="", run=""):
    return program(REPEATED.format(remat=remat) + TAIL.format(run=run))


def batch():
    rows = np.arange(4 * 8, dtype=np.int32).reshape(4, 8) % 16
    return {"row": jnp.asarray(rows), "stride": jnp.ones((4, 1), jnp.int32)}


def loss_fn(p):
    ctx = {k: jnp.asarray(v) for k, v in make_ctx(0, 0, 0).items()}

    def loss(params):
        return run_phase(p.objective, [batch(), ctx], params, Effects(jax.random.key(0)))
    return loss


def stacked_params(seed=1):
    k = jax.random.split(jax.random.key(seed), 4)
    return {"embed": jax.random.normal(k[0], (16, 8), jnp.float32) * 0.3, "out": jax.random.normal(k[1], (8, 16), jnp.float32) * 0.3,
            "blocks": {"w": jax.random.normal(k[2], (3, 8, 8), jnp.float32) * 0.3, "b": jax.random.normal(k[3], (3, 8), jnp.float32) * 0.3}}


def unrolled_params(sp):
    out = {"embed": sp["embed"], "out": sp["out"]}
    for i in range(3):
        out[f"l{i}"] = {"w": sp["blocks"]["w"][i], "b": sp["blocks"]["b"][i]}
    return out


def test_stacked_parameters_have_a_leading_layer_axis():
    p = repeated()
    shapes = {q.path: (q.shape, q.layers) for q in p.params}
    assert shapes[("blocks", "w")] == ((3, 8, 8), 3)
    assert shapes[("blocks", "b")] == ((3, 8), 3)
    assert shapes[("embed",)] == ((16, 8), 0)


@pytest.mark.slow
def test_repeated_equals_unrolled_loss_and_gradients():
    sp = stacked_params()
    rep, unr = repeated(), program(UNROLLED + TAIL.format(run=""))
    l1, g1 = jax.value_and_grad(loss_fn(rep))(sp)
    l2, g2 = jax.value_and_grad(loss_fn(unr))(unrolled_params(sp))
    np.testing.assert_allclose(l1, l2, rtol=1e-5)
    g2s = {"embed": g2["embed"], "out": g2["out"],
           "blocks": {k: jnp.stack([g2[f"l{i}"][k] for i in range(3)]) for k in ("w", "b")}}
    for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2s)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_plain_jax_reference():
    """The repeated model against the same computation written in plain JAX."""
    sp = stacked_params()
    b = batch()
    h = sp["embed"][b["row"]]
    for i in range(3):
        h = h + 0.5 * jnp.tanh(h @ sp["blocks"]["w"][i] + sp["blocks"]["b"][i])
    logits = h @ sp["out"]
    target = (b["row"] + b["stride"]) % 16
    want = jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(logits), target[..., None], -1))
    np.testing.assert_allclose(loss_fn(repeated())(sp), want, rtol=1e-5)


def _eqns(jaxpr):
    for e in jaxpr.eqns:
        yield e
        for v in e.params.values():
            for sub in (v if isinstance(v, (list, tuple)) else [v]):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _eqns(inner)


def test_one_scan_body_of_length_three():
    jaxpr = jax.make_jaxpr(jax.grad(loss_fn(repeated())))(stacked_params()).jaxpr
    scans = [e for e in _eqns(jaxpr) if e.primitive.name == "scan"]
    assert scans and all(e.params["length"] == 3 for e in scans)
    # forward and backward: one scan each, no matmul of the layers outside them
    assert len([e for e in jaxpr.eqns if e.primitive.name == "scan"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("remat", [" :remat :nothing-saveable", " :remat :dots-saveable"])
def test_remat_gives_the_same_gradients_and_checkpoints_the_body(remat):
    sp = stacked_params()
    g0 = jax.grad(loss_fn(repeated()))(sp)
    p = repeated(remat)
    g1 = jax.grad(loss_fn(p))(sp)
    for a, b in zip(jax.tree_util.tree_leaves(g0), jax.tree_util.tree_leaves(g1)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    jaxpr = jax.make_jaxpr(loss_fn(p))(sp).jaxpr
    names = {e.primitive.name for e in _eqns(jaxpr)}
    assert "checkpoint" in names or "remat" in names or "remat2" in names


def test_run_wide_remat_is_the_default_of_every_repeat():
    p = repeated(run=" :remat :nothing-saveable")
    calls = [e for e in __import__("sexpgpu_lang.ir", fromlist=["walk"]).walk(p.objective.body)
             if type(e).__name__ == "Repeat"]
    assert [c.remat for c in calls] == ["nothing-saveable"]
    # the entry's own policy wins over the run's
    p = repeated(" :remat :dots-saveable", " :remat :nothing-saveable")
    calls = [e for e in __import__("sexpgpu_lang.ir", fromlist=["walk"]).walk(p.objective.body)
             if type(e).__name__ == "Repeat"]
    assert [c.remat for c in calls] == ["dots-saveable"]


def test_each_layer_is_initialised_apart_and_deterministically():
    p = repeated()
    t1, _ = init_params(p.params, 0)
    t2, _ = init_params(p.params, 0)
    w = np.asarray(t1["blocks"]["w"])
    assert w.shape == (3, 8, 8)
    assert not np.allclose(w[0], w[1]) and not np.allclose(w[1], w[2])
    np.testing.assert_array_equal(w, np.asarray(t2["blocks"]["w"]))
    np.testing.assert_allclose(w.std(), 0.3, rtol=0.3)


#: REPEATED with no `:remat` and TAIL with no more `run` settings: three layers of `block` in `student`.
PLAIN = RunFile(REPEATED.format(remat="") + TAIL.format(run=""))
#: The layer's body, the value `block`'s `:apply` returns.
LAYER = "(+ h (* scale (tanh (+ (matmul h (getf self :w)) (getf self :b)))))"


def diags(text):
    return [(d.code, text[d.span.start:d.span.end], d.message) for d in analyze(text).diagnostics if d.is_error]


def test_carry_that_changes_type_is_e_model_004_at_the_result():
    text = PLAIN.set("defmodel block :apply (+", f"(cast {LAYER} :bf16)")
    (code, at, msg), = diags(text)
    assert code == "E-MODEL-004"
    assert at.startswith("(cast (+ h")
    assert "[4 8 8] bf16" in msg and "[4 8 8] f32" in msg
    d, = [d for d in analyze(text).diagnostics if d.is_error]
    assert any(text[r.span.start:r.span.end].startswith("(block (take") for r in d.related)
    assert d.help


def test_count_must_be_a_constant_of_one_or_more():
    (code, at, msg), = diags(PLAIN.set("defmodel student :params :blocks", "(repeat block 0)"))
    assert (code, at) == ("E-MODEL-005", "0") and "1 or more" in msg
    (code, at, msg), = diags(PLAIN.set("defmodel student :params :blocks", "(repeat block 2.5)"))
    assert (code, at) == ("E-MODEL-005", "2.5")
    (code, at, msg), = diags(PLAIN.set("defmodel student :params :blocks", "(repeat block 100000000)"))
    assert (code, at) == ("E-MODEL-005", "100000000") and "at most 4096" in msg


def test_unknown_remat_policy_lists_the_policies():
    (code, at, msg), = diags(REPEATED.format(remat=" :remat :nothing") + TAIL.format(run=""))
    assert (code, at) == ("E-FORM-002", ":nothing")
    assert msg == "`:remat` has no policy `:nothing`; did you mean `:nothing-saveable`?"   # its help lists them all


def test_a_repeated_block_also_reached_as_a_plain_sub_model_is_e_model_005():
    text = PLAIN.set("defmodel student :params :extra", "block")
    (code, at, msg), = diags(text)
    assert (code, at) == ("E-MODEL-005", "(repeat block 3)") and "plain sub-model" in msg


def test_a_metric_inside_a_repeated_block_is_e_model_005():
    text = PLAIN.insert("defmodel block :apply (+", "(metric :h (mean h))", before=True)
    codes = [c for c, _, _ in diags(text)]
    assert codes == ["E-MODEL-005"]


def test_hover_on_the_repeat_entry_shows_the_stacked_shapes():
    from sexpgpu_lang import ide
    text = REPEATED.format(remat="") + TAIL.format(run="")
    info = ide.hover(ide.index(analyze(text, "case.sx")), text.index(":blocks") + 2)
    assert info is not None
    assert "w [3 8 8] f32" in info.markdown and "b [3 8] f32" in info.markdown, info.markdown


def train_graph(p):
    from sexpgpu_lang.explain import explain
    return next(g for g in explain(p)["graphs"] if g["name"] == "train")


def test_explain_counts_every_layer_and_shows_one_scan():
    rep, unr = train_graph(repeated()), train_graph(program(UNROLLED + TAIL.format(run="")))
    assert rep["flops"] == unr["flops"]          # N x the body, forward and backward
    assert rep["live"]["args"] == unr["live"]["args"]   # N x the per-layer parameters
    assert rep["scans"] == [{"model": "block", "path": "blocks", "layers": 3, "remat": "everything-saveable"}]
    assert "scans" not in unr


def test_explain_models_remat():
    plain = train_graph(repeated())
    nothing = train_graph(repeated(" :remat :nothing-saveable"))
    dots = train_graph(repeated(" :remat :dots-saveable"))
    # the residuals shrink to the carry per layer; dots-saveable keeps the matmul outputs too
    assert nothing["live"]["temps"] < dots["live"]["temps"] < plain["live"]["temps"]
    # the forward runs again in the backward pass
    assert plain["flops"] < dots["flops"] < nothing["flops"]
    assert nothing["scans"][0]["remat"] == "nothing-saveable"


@pytest.mark.slow
def test_train_export_and_pretrained_see_the_stacked_parameters(tmp_path):
    """A repeated run trains, checkpoints and exports `blocks.w` as [3 8 8]; a frozen copy loads
    it with `:pretrained`, and a file of another depth is E-MODEL-003 naming both depths."""
    from safetensors.numpy import load_file
    from sexpgpu_runtime.weights.params import flatten
    from sexpgpu_runtime import RunOptions, train
    p = repeated(" :remat :nothing-saveable")
    out = train(p, RunOptions(steps=2, run_dir=tmp_path / "a", quiet=True, export=tmp_path / "s.safetensors"))
    tensors = load_file(str(tmp_path / "s.safetensors"))
    assert tensors["blocks.w"].shape == (3, 8, 8) and tensors["blocks.b"].shape == (3, 8)
    np.testing.assert_array_equal(tensors["blocks.w"], np.asarray(out.trainable["blocks"]["w"]))
    text = (PLAIN.set("defmodel student :frozen", "true").set("defmodel student :pretrained", '"s.safetensors"')
            .set("model", "(model top)").add("""(defmodel top
  :params (:student student :head (normal [vocab vocab] :std 0.1))
  :apply (lambda (self row) (matmul (student row) (getf self :head))))""", before="model"))
    path = tmp_path / "next.sx"
    path.write_text(text)
    res = analyze(text, str(path), read_files=True)
    assert res.program is not None, [d.message for d in res.diagnostics]
    got = train(res.program, RunOptions(steps=1, run_dir=tmp_path / "b", quiet=True))
    np.testing.assert_array_equal(np.asarray(flatten(got.frozen)[("student", "blocks", "w")]), tensors["blocks.w"])
    bad = text.set("defmodel student :params :blocks", "(repeat block 2)")
    msgs = [d.message for d in analyze(bad, str(path), read_files=True).diagnostics if d.code == "E-MODEL-003"]
    assert msgs and "`blocks.w` is [3 8 8] f32" in msgs[0] and "expects [2 8 8] f32" in msgs[0]
    assert "the file has 3 layers, the run 2" in msgs[0]


NESTED = HEAD.replace("(defmodel block", """(defmodel proj
  :params (:p (normal [dim dim] :std 0.3))
  :apply (lambda (self h) (matmul h (getf self :p))))

(defmodel block""").replace("(+ h (* scale (tanh (+ (matmul h (getf self :w)) (getf self :b)))))",
                            "(+ h (* scale (tanh (+ (proj (matmul h (getf self :w))) (getf self :b)))))").replace(
    ":params (:w (normal [dim dim] :std 0.3)", ":params (:proj proj\n           :w (normal [dim dim] :std 0.3)").replace(
    "(defmodel block\n", "(defmodel block\n  :remat :dots-saveable\n") + """
(defmodel student
  :params (:embed (normal [vocab dim] :std 0.3)
           :blocks (repeat block 3)
           :out (normal [dim vocab] :std 0.3))
  :apply (lambda (self row)
           (matmul (block (take (getf self :embed) row) 0.5) (getf self :out))))
"""


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_a_sub_model_of_a_repeated_block_is_stacked_and_sliced_per_layer(precision):
    p = program(NESTED + TAIL.format(run=f" :precision :{precision}"))
    shapes = {q.path: q.shape for q in p.params}
    assert shapes[("blocks", "proj", "p")] == (3, 8, 8)
    calls = [e for e in __import__("sexpgpu_lang.ir", fromlist=["walk"]).walk(p.objective.body)
             if type(e).__name__ == "Repeat"]
    assert [c.remat for c in calls] == ["dots-saveable"]   # the block's own :remat
    sp = stacked_params()
    sp["blocks"]["proj"] = {"p": jax.random.normal(jax.random.key(7), (3, 8, 8), jnp.float32) * 0.3}
    b = batch()
    cdt = jnp.bfloat16 if precision == "bf16" else jnp.float32
    c = jax.tree_util.tree_map(lambda x: x.astype(cdt), sp)
    h = c["embed"][b["row"]]
    for i in range(3):
        pre = (h @ c["blocks"]["w"][i]) @ c["blocks"]["proj"]["p"][i] + c["blocks"]["b"][i]
        h = h + jnp.asarray(0.5, cdt) * jnp.tanh(pre)
    logits = h @ c["out"]
    target = (b["row"] + b["stride"]) % 16
    want = jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(logits.astype(jnp.float32)), target[..., None], -1))
    got = loss_fn(p)(sp)
    np.testing.assert_allclose(float(got), float(want), rtol=2e-2 if precision == "bf16" else 1e-5)
    g = train_graph(p)
    assert g["scans"][0]["remat"] == "dots-saveable"


def test_remat_on_a_plain_model_gives_the_same_gradients():
    text = UNROLLED + TAIL.format(run="")
    p0 = program(text)
    p1 = program(RunFile(text).set("defmodel block1 :remat", ":nothing-saveable"))
    params = unrolled_params(stacked_params())
    g0 = jax.grad(loss_fn(p0))(params)
    g1 = jax.grad(loss_fn(p1))(params)
    for a, b in zip(jax.tree_util.tree_leaves(g0), jax.tree_util.tree_leaves(g1)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    names = {e.primitive.name for e in _eqns(jax.make_jaxpr(loss_fn(p1))(params).jaxpr)}
    assert names & {"checkpoint", "remat", "remat2"}
    assert train_graph(p1)["live"]["temps"] < train_graph(p0)["live"]["temps"]


def test_the_editor_knows_repeat_and_remat():
    from sexpgpu_lang import ide
    text = REPEATED.format(remat=" :remat :dots-saveable") + TAIL.format(run="")
    ix = ide.index(analyze(text, "case.sx"))
    info = ide.hover(ix, text.index("(repeat block") + 2)
    assert info is not None and "(repeat model n :remat policy)" in info.markdown
    info = ide.hover(ix, text.index(":remat :dots") + 2)
    assert info is not None and "remat policy of each repeated layer" in info.markdown
    at = text.index(":remat :dots")
    assert ":remat" in [c.label for c in ide.completions(ix, at + 1).items]
    values = [c.label for c in ide.completions(ix, text.index(":dots-saveable") + 1).items]
    assert {":nothing-saveable", ":dots-saveable", ":everything-saveable"} <= set(values)


def test_the_incremental_check_follows_edits_of_a_repeat():
    """Warm (one cache across the edits, as the language server checks) equals cold at each edit."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_check_incremental import observed
    from sexpgpu_lang.check import CheckCache
    text = PLAIN
    blocks = "defmodel student :params :blocks"
    edits = [text,
             text.set(blocks, "(repeat block 5)"),
             text.set(blocks, "(repeat block 5 :remat :dots-saveable)"),
             text.set(blocks, "(repeat block 0)"),
             text.set("defmodel block :apply (+", f"(cast {LAYER} :bf16)"),
             text.set(blocks, "block"),
             text]
    cache = CheckCache()
    codes = []
    for t in edits:
        at = [t.index(":blocks") + 2, t.index("(getf self :w)") + 12]
        warm, cold = observed(t, cache, at), observed(t, None, at)
        for key in cold:
            assert warm[key] == cold[key], key
        codes.append(sorted(d.code for d in cold["diagnostics"] if d.is_error))
    assert codes == [[], [], [], ["E-MODEL-005"], ["E-MODEL-004"], [], []]


def test_adamw_decays_a_stacked_matrix_and_not_a_stacked_bias_or_the_embedding():
    """The `:matrices` decay mask judges a stacked parameter by one layer's rank ([3 8 8] decays,
    [3 8] does not), and finds the embedding table through a repeated model."""
    from sexpgpu_runtime.weights.optim import decay_mask
    prog = program(PLAIN.set("run :optimizer", "(adamw :lr 1e-2)"))
    assert decay_mask(prog, "matrices") == {"embed": False, "blocks": {"w": True, "b": False}, "out": True}
