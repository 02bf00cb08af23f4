"""Hugging Face checkpoints (issue 17): random GPT-2 and Llama checkpoints in the HF layout (bf16, two shards
and `model.safetensors.index.json`, HF's tensor names) loaded through the standard library's mappings
(`:names :gpt2`, `:names :llama`) into a repeated block's stacked parameters, the teacher's logits compared
with a forward pass written here in NumPy; an export in the HF layout loaded back; bad checkpoints refused
in one line naming the file and the tensor, before anything is written."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from sexpgpu_lang import analyze_file
from sexpgpu_runtime.lowering.context import make_ctx
from sexpgpu_runtime.lowering.lowering import Effects, run_phase
from sexpgpu_runtime import RunError
from sexpgpu_runtime.weights.params import init_params
from sexpgpu_runtime.weights.pretrained import export_params, initial_params, load_pretrained
from sexpgpu_lang.name_mapping import stdlib_names

from benchmarks.gpt2_run_file import gpt2_teacher
from helpers import numpy_attention, run

V, T, D, H, K, F, N = 64, 8, 32, 4, 8, 128, 2      # GPT-2: vocab, positions, width, heads, head width, MLP, layers
LK = 2                                              # Llama: key/value heads (grouped-query)


def write_hf(directory: Path, tensors: dict[str, np.ndarray], shards: int = 2) -> Path:
    """`tensors` in bf16 as a sharded HF checkpoint: shards of about equal size and the index."""
    directory.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    cut = [names[i::shards] for i in range(shards)]
    weight_map = {}
    for k, part in enumerate(cut):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n].astype(ml_dtypes.bfloat16) for n in part}, str(directory / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return directory


def as_stored(tensors):
    """The values a bf16 checkpoint holds, in f64 for the reference."""
    return {k: v.astype(ml_dtypes.bfloat16).astype(np.float64) for k, v in tensors.items()}


def gpt2_tensors(rng) -> dict[str, np.ndarray]:
    g = lambda *s, std=0.2: (rng.standard_normal(s) * std).astype(np.float32)
    t = {"transformer.wte.weight": g(V, D), "transformer.wpe.weight": g(T, D, std=0.1),
         "transformer.ln_f.weight": 1 + g(D), "transformer.ln_f.bias": g(D)}
    for i in range(N):
        p = f"transformer.h.{i}."
        t.update({p + "ln_1.weight": 1 + g(D), p + "ln_1.bias": g(D), p + "attn.c_attn.weight": g(D, 3 * D),
                  p + "attn.c_attn.bias": g(3 * D), p + "attn.c_proj.weight": g(D, D), p + "attn.c_proj.bias": g(D),
                  p + "ln_2.weight": 1 + g(D), p + "ln_2.bias": g(D), p + "mlp.c_fc.weight": g(D, F),
                  p + "mlp.c_fc.bias": g(F), p + "mlp.c_proj.weight": g(F, D), p + "mlp.c_proj.bias": g(D)})
    return t


def llama_tensors(rng) -> dict[str, np.ndarray]:
    g = lambda *s, std=0.2: (rng.standard_normal(s) * std).astype(np.float32)
    t = {"model.embed_tokens.weight": g(V, D), "model.norm.weight": 1 + g(D), "lm_head.weight": g(V, D)}
    for i in range(N):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": 1 + g(D), p + "self_attn.q_proj.weight": g(H * K, D),
                  p + "self_attn.k_proj.weight": g(LK * K, D), p + "self_attn.v_proj.weight": g(LK * K, D),
                  p + "self_attn.o_proj.weight": g(D, H * K), p + "post_attention_layernorm.weight": 1 + g(D),
                  p + "mlp.gate_proj.weight": g(F, D), p + "mlp.up_proj.weight": g(F, D),
                  p + "mlp.down_proj.weight": g(D, F)})
    return t


# -- NumPy references, written from Hugging Face's modeling_gpt2.py and modeling_llama.py ----------------------
def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_reference(t, ids):
    b, s = ids.shape
    h = t["transformer.wte.weight"][ids] + t["transformer.wpe.weight"][:s]
    for i in range(N):
        p = lambda n: t[f"transformer.h.{i}.{n}"]
        a = layer_norm(h, p("ln_1.weight"), p("ln_1.bias"))
        q, k, v = np.split(a @ p("attn.c_attn.weight") + p("attn.c_attn.bias"), 3, axis=-1)
        heads = lambda x: x.reshape(b, s, H, K)
        o = numpy_attention(heads(q), heads(k), heads(v), causal=True).reshape(b, s, D)
        h = h + o @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        m = layer_norm(h, p("ln_2.weight"), p("ln_2.bias"))
        h = h + gelu_new(m @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias")) @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    h = layer_norm(h, t["transformer.ln_f.weight"], t["transformer.ln_f.bias"])
    return h @ t["transformer.wte.weight"].T


def rms_norm(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rotate(x, positions):
    """HF's apply_rotary_pos_emb with rotate_half, base 10000: x [B T N Hd]."""
    hd = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (np.arange(0, hd, 2) / hd))
    freqs = positions[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], -1)[None, :, None, :]
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * np.cos(emb) + np.concatenate([-x2, x1], -1) * np.sin(emb)


def llama_reference(t, ids):
    b, s = ids.shape
    pos = np.arange(s, dtype=np.float64)
    h = t["model.embed_tokens.weight"][ids]
    for i in range(N):
        p = lambda n: t[f"model.layers.{i}.{n}"]
        a = rms_norm(h, p("input_layernorm.weight"))
        q = rotate((a @ p("self_attn.q_proj.weight").T).reshape(b, s, H, K), pos)
        k = rotate((a @ p("self_attn.k_proj.weight").T).reshape(b, s, LK, K), pos)
        v = (a @ p("self_attn.v_proj.weight").T).reshape(b, s, LK, K)
        h = h + numpy_attention(q, k, v, causal=True).reshape(b, s, H * K) @ p("self_attn.o_proj.weight").T
        m = rms_norm(h, p("post_attention_layernorm.weight"))
        gate = m @ p("mlp.gate_proj.weight").T
        h = h + (gate / (1 + np.exp(-gate)) * (m @ p("mlp.up_proj.weight").T)) @ p("mlp.down_proj.weight").T
    return rms_norm(h, t["model.norm.weight"]) @ t["lm_head.weight"].T


# -- run files ------------------------------------------------------------------------------------------------
HEAD = f"""(def vocab {V})
(def seq {T})
(def width {D})
(def heads {H})
(def kv-heads {LK})
(def head-width {K})
(def hidden {F})

(loader train
  :source (stride-rows :vocab vocab :seq seq)
  :batch 2
  :fields (:row [seq] :i32 :stride [1] :i32))
"""

LLAMA = """
(defmodel llama-layer
  :params (:attn-norm (ones [width])
           :wq (normal [width heads head-width] :std 0.02)
           :wk (normal [width kv-heads head-width] :std 0.02)
           :wv (normal [width kv-heads head-width] :std 0.02)
           :wo (normal [heads head-width width] :std 0.02)
           :mlp-norm (ones [width])
           :w-gate (normal [width hidden] :std 0.02) :w-up (normal [width hidden] :std 0.02)
           :w-down (normal [hidden width] :std 0.02))
  :apply (lambda (self x positions)
           (llama-block x positions (getf self :attn-norm) (getf self :wq) (getf self :wk) (getf self :wv)
                        (getf self :wo) (getf self :mlp-norm) (getf self :w-gate) (getf self :w-up)
                        (getf self :w-down))))

(defmodel teacher
  :params (:embed (normal [vocab width] :std 0.02)
           :layers (repeat llama-layer 2)
           :norm (ones [width])
           :lm-head (normal [width vocab] :std 0.02))
  :apply (lambda (self ids)
           (let* ((h (llama-layer (embedding (getf self :embed) ids) (iota [seq]))))
             (matmul (rms-norm h (getf self :norm)) (getf self :lm-head))))
  :frozen true
  :pretrained PRETRAINED)
"""

TAIL = """
(defmodel student
  :params (:out (normal [vocab vocab] :std 0.02) :teacher teacher)
  :apply (lambda (self ids) (take (getf self :out) ids)))

(model student)

(prepare (lambda (batch ctx)
  (list :logits (teacher (field batch :row)) :row (field batch :row))))

(objective (lambda (inputs ctx)
  (mean (cross-entropy (model (getf inputs :row)) (getf inputs :row)))))

(run :loader train :steps 2 :seed 0 :optimizer (adam :lr 1e-2) :checkpoint (:every 1))
"""


def run_file(arch: str, pretrained: str) -> str:
    return HEAD + (gpt2_teacher(N, pretrained) if arch == "gpt2" else LLAMA.replace("PRETRAINED", pretrained)) + TAIL


def bf16_teacher(text: str) -> str:
    """`text` with every parameter of the models before the student declared bf16."""
    teacher, student = text.split("(defmodel student")
    teacher = re.sub(r"\((zeros|ones) (\[[^\]]*\])\)", r"(\1 \2 :bf16)", teacher)
    return re.sub(r":std (0\.0\d)\)", r":std \1 :dtype :bf16)", teacher) + "(defmodel student" + student


def checked(text: str, path: Path):
    path.write_text(text)
    res = analyze_file(str(path), read_files=True)
    return res


def program(text: str, path: Path):
    res = checked(text, path)
    assert res.program is not None, [(d.code, d.message) for d in res.diagnostics]
    assert not res.diagnostics, [(d.code, d.message) for d in res.diagnostics]
    return res.program


def teacher_logits(p, ids):
    trainable, frozen = init_params(p.params, 0)
    load_pretrained(p, trainable, frozen)
    params = {**trainable, **frozen}
    batch = {"row": jnp.asarray(ids), "stride": jnp.ones((ids.shape[0], 1), jnp.int32)}
    ctx = {k: jnp.asarray(v) for k, v in make_ctx(0, 0, 0).items()}
    out = run_phase(p.prepare, [batch, ctx], params, Effects(jax.random.key(0)))
    return np.asarray(out["logits"]), trainable, frozen


@pytest.fixture(params=["gpt2", "llama"])
def arch(request):
    return request.param


@pytest.mark.slow
def test_an_hf_checkpoint_loads_into_stacked_parameters_and_gives_the_reference_logits(tmp_path, arch):
    tensors = (gpt2_tensors if arch == "gpt2" else llama_tensors)(np.random.default_rng(1))
    write_hf(tmp_path / "hf", tensors)
    p = program(run_file(arch, f'(:path "hf" :names :{arch} :file-dtype :bf16)'), tmp_path / "run.sx")
    ids = np.random.default_rng(2).integers(0, V, (2, T)).astype(np.int32)
    got, _, frozen = teacher_logits(p, ids)
    want = (gpt2_reference if arch == "gpt2" else llama_reference)(as_stored(tensors), ids)
    assert got.dtype == np.float32 and got.shape == (2, T, V)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    # the repeated layer's parameters are stacked [N ...], in the declared dtype
    stacked = frozen["teacher"]["h" if arch == "gpt2" else "layers"]["wq"]
    assert stacked.shape == (N, D, H, K) and stacked.dtype == jnp.float32


def test_the_index_file_and_a_single_file_directory_load_alike(tmp_path):
    tensors = gpt2_tensors(np.random.default_rng(3))
    write_hf(tmp_path / "hf", tensors)
    one = tmp_path / "one"
    one.mkdir()
    save_file({k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}, str(one / "model.safetensors"))
    loaded = []
    for k, where in enumerate(("hf/model.safetensors.index.json", "hf", "one", "one/model.safetensors")):
        p = program(run_file("gpt2", f'(:path "{where}" :names :gpt2 :file-dtype :bf16)'), tmp_path / f"{k}.sx")
        trainable, frozen = init_params(p.params, k)
        load_pretrained(p, trainable, frozen)
        loaded.append(frozen)
    for other in loaded[1:]:
        jax.tree_util.tree_map(np.testing.assert_array_equal, other, loaded[0])


def test_pretrained_parameters_are_not_drawn_and_the_others_keep_their_bits(tmp_path, monkeypatch):
    import sexpgpu_runtime.weights.params as params_mod
    tensors = gpt2_tensors(np.random.default_rng(7))
    write_hf(tmp_path / "hf", tensors)
    pretrained = '(:path "hf" :names :gpt2 :file-dtype :bf16)'
    text = run_file("gpt2", pretrained)
    p = program(text, tmp_path / "run.sx")
    plain = program(text.replace(f"\n  :pretrained {pretrained})", ")"), tmp_path / "plain.sx")
    assert not plain.pretrained and p.pretrained
    drawn = []
    real = params_mod.init_leaf
    monkeypatch.setattr(params_mod, "init_leaf", lambda q, key: drawn.append(q.path) or real(q, key))
    for seed in (0, 3):
        drawn.clear()
        trainable, frozen = initial_params(p, seed)
        assert drawn == [("out",)]      # the teacher's 20 leaves come from the checkpoint, undrawn
        want_t, want_f = init_params(plain.params, seed)   # the same file without `:pretrained`: all drawn
        assert drawn[1:] and ("teacher", "wte") in drawn
        np.testing.assert_array_equal(trainable["out"], want_t["out"])   # the same bits
        # the trees have the places (and the order) a run without `:pretrained` has
        assert jax.tree_util.tree_structure(frozen) == jax.tree_util.tree_structure(want_f)
        assert list(frozen["teacher"]) == list(want_f["teacher"])
        assert list(frozen["teacher"]["h"]) == list(want_f["teacher"]["h"])
        np.testing.assert_array_equal(np.asarray(frozen["teacher"]["wte"]),
                                      tensors["transformer.wte.weight"].astype(ml_dtypes.bfloat16).astype(np.float32))
    # and they are what loading over drawn values gives
    t2, f2 = init_params(p.params, 3)
    load_pretrained(p, t2, f2)
    jax.tree_util.tree_map(np.testing.assert_array_equal, (t2, f2), (trainable, frozen))


@pytest.mark.slow
@pytest.mark.parametrize("file_dtype", [":bf16", None])
def test_a_checkpoint_changed_after_the_check_is_refused_naming_the_file_and_the_tensor(tmp_path, file_dtype):
    # bf16 into f32 reads each tensor into a buffer of its own and casts it; a bf16 teacher reads
    # straight into its parameters (each layer's c_attn scattered into query, key and value)
    from sexpgpu_lang.files.checkpoint_files import tensors as headers
    from sexpgpu_runtime.weights.hf_layout import _Reader
    tensors = gpt2_tensors(np.random.default_rng(8))
    write_hf(tmp_path / "hf", tensors, shards=1)
    text = run_file("gpt2", '(:path "hf" :names :gpt2' + (f" :file-dtype {file_dtype})" if file_dtype else ")"))
    p = program(text if file_dtype else bf16_teacher(text), tmp_path / "run.sx")
    shard = tmp_path / "hf" / "model-00001-of-00001.safetensors"
    found = headers(str(tmp_path / "hf"))
    name = "transformer.h.1.attn.c_attn.weight"
    changed = dict(tensors, **{name: tensors[name].T.copy()})
    write_hf(tmp_path / "hf", changed, shards=1)
    with pytest.raises(RunError) as e:
        load_pretrained(p, *init_params(p.params, 0))
    assert str(e.value) == (f"{shard}: tensor `{name}` is [96 32] bf16, parameter `h.wq` needs [32 96] bf16 from it "
                            "(the file changed since it was checked?)")
    # a shard cut short between the header's read and the tensor's: the read says where it ended
    write_hf(tmp_path / "hf", tensors, shards=1)
    found = headers(str(tmp_path / "hf"))
    shard.write_bytes(shard.read_bytes()[:-10])
    reader = _Reader(found)
    with pytest.raises(RunError) as e:
        last = max(found, key=lambda t: reader._locate(t, found[t][0], [("x", {"bf16"})])[2])
        reader.scatter(last, found[last][0], [("x", {"bf16"})], 1, [np.empty(found[last][0], ml_dtypes.bfloat16)])
    reader.close()
    assert str(e.value) == f"{shard}: cannot read tensor `{last}`: the file ends 10 bytes before the tensor does"


@pytest.mark.parametrize("preadv", [True, False])
def test_a_scatter_read_fills_its_buffers_in_order_across_calls(tmp_path, monkeypatch, preadv):
    # more buffers than one `preadv` takes, and (without one, as on Windows) a `readinto` each
    import sexpgpu_runtime.weights.hf_layout as hf
    monkeypatch.setattr(hf, "_PREADV", preadv)
    monkeypatch.setattr(hf, "_IOV_MAX", 3)
    data = np.random.default_rng(0).integers(0, 256, 1000, dtype=np.uint8)
    (tmp_path / "f").write_bytes(b"x" * 7 + data.tobytes())
    parts = [np.zeros(n, np.uint8) for n in (0, 1, 100, 0, 399, 250, 250)]
    with open(tmp_path / "f", "rb", buffering=0) as fh:
        hf._read_all(fh, [memoryview(p) for p in parts], 7, 1000)
        np.testing.assert_array_equal(np.concatenate(parts), data)
        with pytest.raises(OSError, match="^the file ends 10 bytes before the tensor does$"):
            hf._read_all(fh, [memoryview(np.zeros(1000, np.uint8))], 17, 1000)
        hf._read_all(fh, [memoryview(np.zeros(0, np.uint8))], 2000, 0)   # an empty tensor reads nothing


def test_a_bf16_teacher_can_stay_bf16_without_a_cast(tmp_path):
    tensors = gpt2_tensors(np.random.default_rng(4))
    write_hf(tmp_path / "hf", tensors)
    # every parameter of the teacher is bf16 here (the student's own is f32), so no cast is needed
    p = program(bf16_teacher(run_file("gpt2", '(:path "hf" :names :gpt2)')), tmp_path / "run.sx")
    _, frozen = initial_params(p, 0)
    assert frozen["teacher"]["h"]["wq"].dtype == jnp.bfloat16
    want = tensors["transformer.h.1.attn.c_attn.weight"].astype(ml_dtypes.bfloat16)[:, D:2 * D].reshape(D, H, K)
    np.testing.assert_array_equal(np.asarray(frozen["teacher"]["h"]["wk"][1]), want)


def test_export_in_the_hf_layout_loads_back_identical(tmp_path, arch):
    tensors = (gpt2_tensors if arch == "gpt2" else llama_tensors)(np.random.default_rng(5))
    write_hf(tmp_path / "hf", tensors)
    p = program(run_file(arch, f'(:path "hf" :names :{arch} :file-dtype :bf16)'), tmp_path / "run.sx")
    trainable, frozen = init_params(p.params, 0)
    load_pretrained(p, trainable, frozen)
    # the teacher's tree as the root of an export, through the same mapping inverted, in shards of 20 kB
    export_params(tmp_path / "out", {}, frozen["teacher"], include_frozen=True, names=stdlib_names()[arch],
                  max_shard_bytes=20_000)
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2 and set(index["weight_map"]) == set(tensors)
    for name, fname in index["weight_map"].items():
        with safe_open(str(tmp_path / "out" / fname), "numpy") as fh:
            np.testing.assert_array_equal(fh.get_tensor(name), tensors[name].astype(ml_dtypes.bfloat16).astype(np.float32))
    back = program(run_file(arch, f'(:path "out" :names :{arch})'), tmp_path / "back.sx")
    t2, f2 = init_params(back.params, 1)
    load_pretrained(back, t2, f2)
    jax.tree_util.tree_map(np.testing.assert_array_equal, f2, frozen)


# -- bad input: one line naming the file and the tensor, at the `:pretrained` form -------------------------------
def one_error(tmp_path, pretrained='(:path "hf" :names :gpt2 :file-dtype :bf16)', text=None):
    res = checked(text or run_file("gpt2", pretrained), tmp_path / "run.sx")
    errors = [d for d in res.diagnostics if d.is_error]
    assert len(errors) == 1 and res.program is None, [(d.code, d.message) for d in res.diagnostics]
    assert "\n" not in errors[0].message
    return errors[0]


def test_a_missing_checkpoint_names_where_it_was_looked_for_and_how_to_fix_it(tmp_path):
    d = one_error(tmp_path, '(:path "nope" :names :gpt2)')
    assert d.code == "E-MODEL-003"
    assert d.message == f"cannot use `nope`: no such file (looked for {tmp_path / 'nope'})"
    assert "model.safetensors.index.json" in d.help and "relative to the run file" in d.help


def test_a_missing_shard_names_the_shard_and_a_tensor(tmp_path):
    write_hf(tmp_path / "hf", gpt2_tensors(np.random.default_rng(0)))
    (tmp_path / "hf" / "model-00002-of-00002.safetensors").unlink()
    d = one_error(tmp_path)
    assert d.code == "E-MODEL-003"
    assert d.message == ("cannot use `hf`: `hf/model.safetensors.index.json` places tensor `transformer.wpe.weight` in "
                         "`model-00002-of-00002.safetensors`, which is not there")


def test_an_index_naming_a_file_that_is_not_there(tmp_path):
    write_hf(tmp_path / "hf", gpt2_tensors(np.random.default_rng(0)))
    index = tmp_path / "hf" / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"]["transformer.ln_f.bias"] = "model-00003-of-00002.safetensors"
    index.write_text(json.dumps(data))
    d = one_error(tmp_path)
    assert d.message == ("cannot use `hf`: `hf/model.safetensors.index.json` places tensor `transformer.ln_f.bias` in "
                         "`model-00003-of-00002.safetensors`, which is not there")


def test_a_truncated_shard_names_the_shard_and_the_tensor(tmp_path):
    write_hf(tmp_path / "hf", gpt2_tensors(np.random.default_rng(0)))
    shard = tmp_path / "hf" / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    d = one_error(tmp_path)
    assert d.message.startswith("cannot use `hf`: `hf/model-00001-of-00002.safetensors` is cut short: tensor `")
    # an absolute `:path` is shown absolute (not as ../../ from the run file's directory)
    d = one_error(tmp_path, f'(:path "{tmp_path}/hf" :names :gpt2 :file-dtype :bf16)')
    assert d.message.startswith(f"cannot use `{tmp_path}/hf`: `{tmp_path}/hf/model-00001-of-00002.safetensors` is cut "
                                "short: tensor `")


def test_a_wrong_shape_after_the_mapping_names_the_tensor_and_the_parameter(tmp_path):
    tensors = gpt2_tensors(np.random.default_rng(0))
    tensors["transformer.h.1.attn.c_attn.weight"] = tensors["transformer.h.1.attn.c_attn.weight"][:, :2 * D]
    write_hf(tmp_path / "hf", tensors)
    d = one_error(tmp_path)
    assert d.code == "E-MODEL-003"
    assert ("tensor `transformer.h.1.attn.c_attn.weight` is [32 64] bf16, parameters `h.wq`, `h.wk` and `h.wv` "
            "(each [2 32 4 8] f32) of `teacher` need [32 96] bf16 from it") in d.message


def test_a_pattern_matching_no_tensor(tmp_path):
    write_hf(tmp_path / "hf", gpt2_tensors(np.random.default_rng(0)))
    mapping = " ".join(f':{k} "{v[1]}"' for k, v in stdlib_names()["gpt2"].items() if v[0] == "tensor")
    names = stdlib_names()["gpt2"]
    text = run_file("gpt2", '(:path "hf" :file-dtype :bf16 :names (' + mapping.replace(
        "transformer.h.{i}.ln_1.weight", "transformer.layers.{i}.ln_1.weight") + " " + " ".join(
        f":{k} {sx(v)}" for k, v in names.items() if v[0] != "tensor") + "))")
    d = one_error(tmp_path, text=text)
    assert d.code == "E-MODEL-003"
    assert "has no tensor matching `transformer.layers.{i}.ln_1.weight` (layers 0 to 1, for parameter `h.ln1-gain`)" \
        in d.message


def sx(expr) -> str:
    """A mapping source written back as SexpGPU text."""
    if expr[0] == "tensor":
        return f'"{expr[1]}"'
    if expr[0] == "split":
        return f"(split {sx(expr[1])} :axis {expr[2]} :parts {expr[3]} :index {expr[4]})"
    if expr[0] == "transpose":
        return f"(transpose {sx(expr[1])}" + (f" [{' '.join(map(str, expr[2]))}])" if expr[2] else ")")
    return f"(split-heads {sx(expr[1])} :axis {expr[2]})"


def test_a_bf16_file_into_f32_parameters_without_file_dtype_says_how_to_cast(tmp_path):
    write_hf(tmp_path / "hf", gpt2_tensors(np.random.default_rng(0)))
    d = one_error(tmp_path, '(:path "hf" :names :gpt2)')
    assert d.code == "E-MODEL-003" and d.message.startswith(
        "`hf`: its 28 tensors are bf16 where the parameters read from them are f32, the shapes agreeing: "
        "`transformer.wte.weight`, ")
    assert d.message.endswith(" and 22 more") and len(d.message) < 400
    assert ":file-dtype :bf16" in d.help


def test_a_mapping_that_does_not_fit_the_params_is_e_model_006(tmp_path):
    write_hf(tmp_path / "hf", gpt2_tensors(np.random.default_rng(0)))
    d = one_error(tmp_path, '(:path "hf" :names :llama)')
    assert d.code == "E-MODEL-006"
    assert "the mapping `llama` maps `embed`, which is not a parameter of `teacher`" in d.message
    assert "parameter `wte` [64 32] of `teacher` has no entry in the mapping `llama`" in d.message
    d = one_error(tmp_path, '(:path "hf" :names :gtp2)')
    assert d.code == "E-MODEL-006" and "did you mean `:gpt2`?" in d.message


@pytest.mark.slow
def test_frozen_parameters_are_not_in_checkpoints_and_a_changed_teacher_refuses_the_resume(tmp_path):
    tensors = gpt2_tensors(np.random.default_rng(6))
    write_hf(tmp_path / "hf", tensors)
    text = run_file("gpt2", '(:path "hf" :names :gpt2 :file-dtype :bf16)')
    (tmp_path / "run.sx").write_text(text)
    run(text, tmp_path, 2)
    meta = json.loads((tmp_path / "checkpoints" / "2" / "meta" / "metadata").read_text())
    # the checkpoint's arrays (its digests name each): the student's and the optimizer's, not the teacher's
    assert sorted(meta["digests"]) == ["['opt_state'][0].count", "['opt_state'][0].mu['out']",
                                       "['opt_state'][0].nu['out']", "['trainable']['out']"]
    assert set(meta["pretrained"]) == {str(tmp_path / "hf" / f) for f in
                                       ("model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors")}
    # the same teacher resumes
    res = run(text, tmp_path, 3, resume=True)
    assert res.start == 2
    # a changed teacher (same names and shapes, other values) is refused, nothing written
    tensors["transformer.ln_f.bias"] = tensors["transformer.ln_f.bias"] + 1
    write_hf(tmp_path / "hf", tensors)
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(RunError) as e:
        run(text, tmp_path, 4, resume=True)
    assert "\n" not in str(e.value)
    assert "was made with the pretrained file " + str(tmp_path / "hf") in str(e.value)
    assert "which has changed since" in str(e.value)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


@pytest.mark.slow
def test_a_project_moved_with_its_run_dir_resumes_and_a_changed_teacher_there_is_still_refused(tmp_path):
    """The checkpoint records each pretrained file's SHA-256 by its path and by its path relative to
    the run file, so the same bytes at the same relative place resume (another mount point)."""
    import shutil
    tensors = gpt2_tensors(np.random.default_rng(8))
    write_hf(tmp_path / "a" / "hf", tensors)
    text = run_file("gpt2", '(:path "hf" :names :gpt2 :file-dtype :bf16)')
    (tmp_path / "a" / "run.sx").write_text(text)
    run(text, tmp_path / "a", 2)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    changed = dict(tensors, **{"transformer.ln_f.bias": tensors["transformer.ln_f.bias"] + 1})
    write_hf(tmp_path / "b" / "hf", changed)
    with pytest.raises(RunError) as e:
        run(text, tmp_path / "b", 3, resume=True)
    assert "was made with the pretrained file " + str(tmp_path / "a" / "hf") in str(e.value)
    assert "which has changed since (read now as " + str(tmp_path / "b" / "hf") in str(e.value)
    write_hf(tmp_path / "b" / "hf", tensors)
    moved = run(text, tmp_path / "b", 3, resume=True)
    assert moved.start == 2


@pytest.mark.slow
def test_a_nan_loss_from_a_teacher_checkpoint_that_holds_a_nan_names_the_parameter_and_the_file(tmp_path):
    tensors = gpt2_tensors(np.random.default_rng(9))
    weight = np.asarray(tensors["transformer.ln_f.weight"], np.float32).copy()
    weight[3] = np.nan
    tensors["transformer.ln_f.weight"] = weight.astype(tensors["transformer.ln_f.weight"].dtype)
    write_hf(tmp_path / "hf", tensors)
    plain = "(mean (cross-entropy (model (getf inputs :row)) (getf inputs :row)))"
    text = run_file("gpt2", '(:path "hf" :names :gpt2 :file-dtype :bf16)')
    assert plain in text
    text = text.replace(plain, f"(+ {plain} (* 0.0 (mean (getf inputs :logits))))")   # a loss that reads the teacher
    (tmp_path / "run.sx").write_text(text)
    with pytest.raises(RunError) as e:
        run(text, tmp_path, 2)
    assert str(e.value) == (f"step 1: `loss` is nan, so the run stopped: frozen parameter `teacher.lnf-gain` holds "
                            "nan at [3] (its values are read from tensor `transformer.ln_f.weight` of "
                            f"{tmp_path / 'hf'}: the checkpoint holds it; fix or replace the file); no checkpoint was "
                            "saved")
    # fine-tuning the same checkpoint (trainable): its initial value is named, as it was before any step
    tune = HEAD + gpt2_teacher(N, '(:path "../hf" :names :gpt2 :file-dtype :bf16)').replace("  :frozen true\n", "") \
        + FINETUNE
    with pytest.raises(RunError) as e:
        run(tune, tmp_path / "tune", 2)
    assert str(e.value).startswith("step 1: `loss` is nan, so the run stopped: initial parameter `lnf-gain` holds nan "
                                   "at [3] (its values are read from tensor `transformer.ln_f.weight` of ")


@pytest.mark.slow
def test_a_resume_draws_and_reads_only_the_frozen_parameters(tmp_path, monkeypatch):
    """A checkpoint holds the trainable parameters and the optimizer state; a resume makes only what
    it lacks (the frozen teacher, read again), with the bits a fresh run gives it."""
    import sexpgpu_runtime.weights.params as params_module
    from sexpgpu_runtime.weights.params import flatten
    write_hf(tmp_path / "hf", gpt2_tensors(np.random.default_rng(7)))
    text = run_file("gpt2", '(:path "hf" :names :gpt2 :file-dtype :bf16)')
    (tmp_path / "run.sx").write_text(text)
    first = run(text, tmp_path, 2)
    drawn = []     # the leaves drawn with values (the resume's eval_shape of the state only traces them)
    real = params_module.init_leaf

    def init_leaf(p, key):
        out = real(p, key)
        if not isinstance(out, jax.core.Tracer):
            drawn.append((p.path, p.frozen))
        return out
    monkeypatch.setattr(params_module, "init_leaf", init_leaf)
    res = run(text, tmp_path, 3, resume=True)
    assert res.start == 2
    assert [path for path, frozen in drawn if not frozen] == []
    assert flatten(first.frozen) and flatten(first.frozen).keys() == flatten(res.frozen).keys()
    for path, a in flatten(first.frozen).items():
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(flatten(res.frozen)[path]).view(np.uint8)), path


def test_export_writes_the_trainable_parameters_unless_asked_for_the_frozen_too(tmp_path):
    trainable, frozen = {"out": np.ones((2, 2), np.float32)}, {"teacher": {"wte": np.zeros((3,), np.float32)}}
    export_params(tmp_path / "a.safetensors", trainable, frozen)
    export_params(tmp_path / "b.safetensors", trainable, frozen, include_frozen=True)
    with safe_open(str(tmp_path / "a.safetensors"), "numpy") as fh:
        assert sorted(fh.keys()) == ["out"]
    with safe_open(str(tmp_path / "b.safetensors"), "numpy") as fh:
        assert sorted(fh.keys()) == ["out", "teacher.wte"]


def test_export_names_is_checked_before_training(tmp_path):
    from sexpgpu_runtime import OptionError, RunOptions, check_options
    write_hf(tmp_path / "hf", gpt2_tensors(np.random.default_rng(0)))
    p = program(run_file("gpt2", '(:path "hf" :names :gpt2 :file-dtype :bf16)'), tmp_path / "run.sx")
    with pytest.raises(OptionError, match=r"^--export-names: no standard-library mapping `gtp2`; they are `gpt2`, `llama`, `llama-tied`, `qwen2`, "
                                          r"`qwen2-tied`, `qwen3`, `qwen3-tied`, `olmo2`, and the file's models with a `:names` mapping: `teacher`$"):
        check_options(p, RunOptions(export=tmp_path / "out", export_names="gtp2"))
    # the root model is the student, which has no `h.b1` (its teacher has `teacher.h.b1`)
    with pytest.raises(OptionError, match=r"^--export-names gpt2: parameter `h\.b1` is not a parameter of the model "
                                          r"\(the mapping is written in sexpgpu_lang/hf_names.sx\)$"):
        check_options(p, RunOptions(export=tmp_path / "out", export_names="gpt2"))
    # a model of the file names its own mapping, over the root model's parameters as a standard one is
    with pytest.raises(OptionError, match=r"^--export-names teacher: parameter `h\.b1` is not a parameter of the "
                                          r"model \(the `:names` of `teacher`'s `:pretrained`\)$"):
        check_options(p, RunOptions(export=tmp_path / "out", export_names="teacher"))
    assert not (tmp_path / "out").exists()
    # the options that say how to write an export need one
    with pytest.raises(OptionError, match=r"^--export-names says how to write --export; give --export DIR too$"):
        check_options(p, RunOptions(export_names="gpt2"))
    with pytest.raises(OptionError, match=r"^--export-frozen says what --export writes; give --export PATH too$"):
        check_options(p, RunOptions(export_frozen=True))


FINETUNE = """
(model teacher)

(objective (lambda (batch ctx)
  (mean (cross-entropy (model (field batch :row)) (field batch :row)))))

(run :loader train :steps 2 :seed 0 :optimizer (adam :lr 1e-2))
"""


def own_mapping() -> str:
    """The `:gpt2` mapping written in place, every tensor's `transformer.` renamed `gpt.`: no
    standard-library mapping reads such a checkpoint."""
    return "(" + " ".join(f":{k} {sx(v)}" for k, v in stdlib_names()["gpt2"].items()).replace("transformer.", "gpt.") + ")"


@pytest.mark.slow
def test_export_names_with_the_files_own_mapping_writes_the_hf_layout_that_loads_back_identical(tmp_path):
    tensors = {k.replace("transformer.", "gpt."): v for k, v in gpt2_tensors(np.random.default_rng(9)).items()}
    write_hf(tmp_path / "hf", tensors)
    # fine-tuning: the checkpoint loaded through the file's own mapping is the root model, and is trained
    text = HEAD + gpt2_teacher(N, f'(:path "hf" :names {own_mapping()} :file-dtype :bf16)').replace(
        "  :frozen true\n", "") + FINETUNE
    res = run(text, tmp_path, 2, export=tmp_path / "out", export_names="teacher", max_shard_bytes=20_000)
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(tensors) and len(set(index["weight_map"].values())) > 1
    # the trained values, not the checkpoint's: the export is the run's
    wte = tensors["gpt.wte.weight"].astype(ml_dtypes.bfloat16).astype(np.float32)
    assert not np.array_equal(np.asarray(res.trainable["wte"]), wte)
    with safe_open(str(tmp_path / "out" / index["weight_map"]["gpt.h.1.attn.c_attn.weight"]), "numpy") as fh:
        c_attn = fh.get_tensor("gpt.h.1.attn.c_attn.weight")
    h = {k: np.asarray(v[1]) for k, v in res.trainable["h"].items()}
    np.testing.assert_array_equal(c_attn, np.concatenate([h[w].reshape(D, D) for w in ("wq", "wk", "wv")], axis=1))
    # and a run reading the export through the same mapping gets every trained tensor back, bit for bit
    back = program(HEAD + gpt2_teacher(N, f'(:path "out" :names {own_mapping()})') + TAIL, tmp_path / "back.sx")
    _, frozen = initial_params(back, 1)
    jax.tree_util.tree_map(np.testing.assert_array_equal, frozen["teacher"], res.trainable)
