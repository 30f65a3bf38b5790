"""Weight files of decoder networks (issue 21): every new block name read and written, the round
trip through the file, and one-line refusals (exit 2 on the CLI) for missing or misshaped blocks."""

import json

import numpy as np
import pytest

from neuromanifold import Architecture
from neuromanifold.cli import main
from neuromanifold.core.blocks import random_block_weights
from neuromanifold.errors import InputError
from neuromanifold.io.weightfiles import read_network_file, write_block_weights

# name: (architecture, the options a file does not store, as read_network_file takes them)
NETWORKS = {
    "llama": (Architecture((4, 4, 4), 4, 3, "softmax", heads=2, residual=True, mlp=3,
                           activation="silu", norm="rmsnorm", causal=True, positions="rope",
                           kv_heads=1, mlp_kind="gated", vocab=5, final_norm=True),
              dict(residual=True, activation="silu", norm="rmsnorm", causal=True,
                   positions="rope")),
    "gpt2": (Architecture((4, 4), 2, 3, "softmax", heads=2, residual=True, mlp=3,
                          activation="gelu", norm="layernorm", causal=True, positions="learned",
                          bias=True, mlp_bias=True, vocab=5, tied=True, final_norm=True),
             dict(residual=True, activation="gelu", norm="layernorm", causal=True)),
    "neox": (Architecture((4, 4), 4, 2, "softmax", residual=True, mlp=2, activation="gelu",
                          norm="layernorm", positions="rope", rope_pairs=1, qk_norm=True,
                          parallel=True),
             dict(residual=True, activation="gelu", norm="layernorm", positions="rope",
                  rope_pairs=1, parallel=True)),
    "grouped": (Architecture((3, 4), 2, 2, "lightning", heads=4, kv_heads=2, values=2, bias=True),
                dict()),
}


def _write(tmp_path, name, seed=1):
    arch, options = NETWORKS[name]
    blocks = {k: v.numpy() for k, v in random_block_weights(arch, seed).items()}
    path = write_block_weights(tmp_path / f"{name}.npz", blocks)
    return arch, options, blocks, path


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_round_trip(tmp_path, name):
    arch, options, blocks, path = _write(tmp_path, name)
    data = read_network_file(path, tokens=arch.tokens, attention=arch.attention, **options)
    assert data.arch == arch and data.format == "block"
    assert sorted(data.point) == sorted(blocks)
    assert all(np.array_equal(data.point[k], blocks[k]) for k in blocks)


def _expect_refusal(tmp_path, name, change, message, **override):
    tmp_path = tmp_path / str(len(list(tmp_path.iterdir())))
    tmp_path.mkdir()
    arch, options, blocks, _ = _write(tmp_path, name)
    blocks = change(dict(blocks))
    path = write_block_weights(tmp_path / "changed.npz", blocks)
    with pytest.raises(InputError) as err:
        read_network_file(path, tokens=arch.tokens, attention=arch.attention,
                          **{**options, **override})
    text = str(err.value)
    assert "\n" not in text and message in text


def test_missing_and_misshaped_blocks_are_refused(tmp_path):
    def drop(name):
        return lambda b: {k: v for k, v in b.items() if k != name}

    def reshape(name, shape):
        return lambda b: {**b, name: np.zeros(shape)}

    _expect_refusal(tmp_path, "llama", reshape("E", (5, 3)), "`weights:E` must be of shape (5, 4)")
    _expect_refusal(tmp_path, "llama", drop("G_2"), "a block G_2")
    _expect_refusal(tmp_path, "llama", drop("E"), "a block E")
    _expect_refusal(tmp_path, "gpt2", drop("T"), "a block T", positions="learned")
    _expect_refusal(tmp_path, "gpt2", drop("bq_1_2"), "a block bq_1_2")
    _expect_refusal(tmp_path, "neox", drop("kn_1_1"), "a block kn_1_1")
    _expect_refusal(tmp_path, "neox", reshape("qn_1_1", (3, 1)), "must be of shape (4, 1)")
    _expect_refusal(tmp_path, "grouped", reshape("K_1_2", (2, 4)), "must be of shape (2, 3)")
    _expect_refusal(tmp_path, "grouped", lambda b: {**b, "X": np.zeros((1, 1))}, "member 'X.npy'")
    # options that contradict the blocks, or that the blocks need
    _expect_refusal(tmp_path, "gpt2", lambda b: b, "learned positions T", positions="rope")
    arch, options, _, path = _write(tmp_path, "gpt2", seed=2)
    assert read_network_file(path, tokens=3, attention="softmax", positions="learned",
                             **options).arch == arch
    _expect_refusal(tmp_path, "neox", lambda b: b, "layernorm or rmsnorm", norm=None)


def test_untied_logits_need_an_embedding_and_tied_ones_equal_widths(tmp_path):
    arch = Architecture((3, 4), 2, 2, vocab=5)
    blocks = {k: v.numpy() for k, v in random_block_weights(arch, 0).items()}
    path = write_block_weights(tmp_path / "no_e.npz", {k: v for k, v in blocks.items() if k != "E"})
    with pytest.raises(InputError, match="a block E"):
        read_network_file(path, tokens=2)
    path = write_block_weights(tmp_path / "no_l.npz", {k: v for k, v in blocks.items() if k != "L"})
    with pytest.raises(InputError, match=r"a block L of shape \(5, 4\)"):
        read_network_file(path, tokens=2)


def test_paper_format_file_with_rotary_positions(tmp_path):
    from neuromanifold.io.weightfiles import write_weights
    from neuromanifold import random_weights

    path = write_weights(tmp_path / "paper.npz", random_weights(Architecture((4, 4), 4, 2), 0))
    data = read_network_file(path, tokens=2, positions="rope", rope_pairs=1)
    assert data.arch == Architecture((4, 4), 4, 2, heads=1, positions="rope", rope_pairs=1)
    with pytest.raises(InputError, match="paper's format"):
        read_network_file(path, tokens=2, positions="learned")


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_rank_cli_reads_a_decoder_file(tmp_path, capsys):
    arch, _, _, path = _write(tmp_path, "neox")
    args = ["rank", "--weights", str(path), "--tokens", "2", "--attention", "softmax",
            "--residual", "--activation", "gelu", "--norm", "layernorm", "--positions", "rope",
            "--rope-pairs", "1", "--parallel", "--method", "numerical", "--no-generic"]
    code, out, _ = run(capsys, *args, "--qk-norm", "--json")
    d = json.loads(out)
    assert d["n_params"] == arch.n_params and d["architecture"]["parallel"]
    assert d["float_rank"] <= d["upper_bound"] and code in (0, 1)
    # an option the blocks contradict, or one the network needs: one line, exit 2
    for extra, word in ((["--bias"], "`bias`"), (["--vocab", "5"], "`vocab`"),
                        (["--kv-heads", "2"], "`kv-heads`")):
        code, out, err = run(capsys, *args, *extra)
        assert code == 2 and out == "" and word in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, *[a for a in args if a != "--residual"])
    assert code == 2 and "`parallel`" in err and len(err.strip().splitlines()) == 1


def test_rank_cli_with_token_inputs(tmp_path, capsys):
    arch = Architecture((3, 3), 3, 2, vocab=3, tied=True)
    blocks = {k: v.numpy() for k, v in random_block_weights(arch, 2).items()}
    path = write_block_weights(tmp_path / "tied.npz", blocks)
    code, out, _ = run(capsys, "rank", "--weights", str(path), "--tokens", "2", "--no-residual",
                       "--tied", "--vocab", "3", "--no-generic", "--json")
    d = json.loads(out)
    assert d["architecture"]["vocab"] == 3 and d["n_samples"] <= 9
    assert any("token sequences" in n for n in d["notes"])
    assert d["rank"] <= d["upper_bound"] <= arch.n_params and code in (0, 1)
