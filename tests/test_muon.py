"""``--optimizer muon``: Muon on the blocks' matrices, AdamW on the rest.

Muon's update is checked against the algorithm as Jordan et al. 2024 write it
(momentum ``B_t = mu B_{t-1} + G_t``, Nesterov input ``G_t + mu B_t``, five
quintic Newton-Schulz iterations on the Frobenius-normalised matrix, the
rate scaled by ``sqrt(max(1, rows / cols))``, decoupled weight decay),
computed here in float64; PyTorch runs the iterations in bfloat16, so the
comparison allows bfloat16's rounding. The AdamW side is checked against
``torch.optim.AdamW`` on the same parameters and gradients.
"""

from __future__ import annotations

import copy
import json
import math
import os
import signal
from pathlib import Path

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from octlm.cli import main
from octlm.model import Decoder, DecoderConfig
from octlm.model.positions import SCHEMES
from octlm.report import Reporter
from octlm.train.launch import train
from octlm.train.optim import MuonWithAdamW, make_optimizer, muon_parameters, scheduled_lr
from octlm.train.options import TrainOptions
from tests.conftest import SMALL_RUN

# results depend on float rounding: scripts/test.sh runs them again under other CPU kernels and threads
pytestmark = pytest.mark.rounding

QUIET = Reporter(json_mode=True)
TINY = dict(SMALL_RUN, dropout=0.1, optimizer="muon")
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Jordan et al. 2024's quintic iteration X <- aX + (bA + cA^2)X, A = X X^T, from X = G / ||G||_F (wide
    orientation)."""
    a, b, c = NS_COEFFICIENTS
    tall = g.shape[0] > g.shape[1]
    x = (g.T if tall else g) / g.norm()
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


@given(
    rows=st.integers(2, 24),
    cols=st.integers(2, 24),
    seed=st.integers(0, 2**31 - 1),
    momentum=st.sampled_from([0.0, 0.9, 0.95]),
    weight_decay=st.sampled_from([0.0, 0.1]),
    nesterov=st.booleans(),
)
# two steps whose updates nearly cancel (found on an Intel CPU): the bound must be on the steps, not their sum
@example(rows=2, cols=2, seed=5000, momentum=0.0, weight_decay=0.0, nesterov=False)
def test_two_muon_steps_follow_the_papers_update(rows, cols, seed, momentum, weight_decay, nesterov):
    """One Newton-Schulz iteration per step, so that bfloat16's rounding stays near its 0.4% per operation.

    Five iterations amplify it up to 3.4 times each at small singular values
    (the quintic's slope at zero), which would drown a wrong coefficient or
    step count in noise; the five come from PyTorch's defaults, checked below.
    """
    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    grads = [torch.randn(rows, cols, generator=g, dtype=torch.float64) for _ in range(2)]
    lr = 0.02
    param = torch.nn.Parameter(w0.float().clone())
    opt = torch.optim.Muon(
        [param],
        lr=lr,
        momentum=momentum,
        weight_decay=weight_decay,
        nesterov=nesterov,
        ns_steps=1,
        adjust_lr_fn="original",
    )

    expected, buf, travelled = w0.clone(), torch.zeros_like(w0), 0.0
    for grad in grads:
        param.grad = grad.float().clone()
        opt.step()
        buf = momentum * buf + grad
        update = newton_schulz(grad + momentum * buf if nesterov else buf, steps=1)
        step = lr * math.sqrt(max(1, rows / cols)) * update
        expected = expected * (1 - lr * weight_decay) - step
        travelled += step.norm().item()
        moved, want = param.detach().double() - w0, expected - w0
        # bfloat16 rounds each step's update by about 0.4% per operation, so the error is a share of the steps'
        # sizes, not of their sum: two steps that nearly cancel (the 2x2 example, 2.7e-3 left of 0.043) would fail a
        # bound on the sum. Measured at most 1.1% of the steps over 3,000 cases; a wrong coefficient or a missing
        # momentum term moves the update by tens of percent.
        assert (moved - want).norm() <= 0.03 * travelled


def test_octlms_muon_is_the_papers():
    """Five iterations with Jordan et al.'s coefficients, Nesterov momentum, and the sqrt(max(1, rows / cols)) rate."""
    model = Decoder(DecoderConfig(vocab_size=64, context_length=16, d_model=16, n_heads=2, n_layers=1))
    muon = make_optimizer(model, TrainOptions.of(optimizer="muon"), torch.device("cpu")).optimizers[0]
    assert isinstance(muon, torch.optim.Muon)
    for group in muon.param_groups:
        assert group["ns_steps"] == 5 and group["nesterov"] is True and group["adjust_lr_fn"] == "original"
        assert group["ns_coefficients"] == pytest.approx(NS_COEFFICIENTS, abs=1e-4)


#: Muon options unlike both octlm's defaults and torch.optim.Muon's (lr 1e-3, momentum 0.95, weight decay 0.1), so an
#: option dropped on the way to the optimizer shows.
MUON_FLAGS = {"muon_lr": 0.037, "muon_momentum": 0.3, "muon_weight_decay": 0.4}


def muon_from_the_command_line() -> tuple[Decoder, MuonWithAdamW]:
    from octlm.cli import build_parser, options_from

    args = build_parser().parse_args(
        ["train", "--d-model", "16", "--n-heads", "2", "--n-layers", "1", *flags(**MUON_FLAGS)]
    )
    opts = options_from(args, TrainOptions)
    torch.manual_seed(0)
    model = Decoder(opts.model_config(64))
    return model, make_optimizer(model, opts, torch.device("cpu"))


def test_the_muon_flags_reach_the_optimizer_octlm_builds():
    """--muon-lr, --muon-momentum and --muon-weight-decay, parsed as `octlm train` parses them, are the rate,
    momentum and weight decay of every group of the Muon that make_optimizer builds."""
    defaults, torchs = TrainOptions(), torch.optim.Muon([torch.nn.Parameter(torch.zeros(2, 2))]).defaults
    for name, value in MUON_FLAGS.items():
        assert value != getattr(defaults, name)
    assert (MUON_FLAGS["muon_momentum"], MUON_FLAGS["muon_weight_decay"]) != (
        torchs["momentum"],
        torchs["weight_decay"],
    )
    model, optimizer = muon_from_the_command_line()
    muon = optimizer.optimizers[0]
    assert muon.param_groups and {id(p) for g in muon.param_groups for p in g["params"]} == {
        id(p) for n, p in model.named_parameters() if n in muon_parameters(model)
    }
    for group in muon.param_groups:
        assert group["lr"] == group["peak_lr"] == MUON_FLAGS["muon_lr"]
        assert group["momentum"] == MUON_FLAGS["muon_momentum"]
        assert group["weight_decay"] == MUON_FLAGS["muon_weight_decay"]


def test_steps_of_octlms_muon_follow_the_papers_update():
    """The optimizer octlm builds from the flags, stepped on a small model, moves each block matrix as Jordan et al.
    2024 write the update (five Newton-Schulz iterations, Nesterov momentum, sqrt(max(1, rows / cols)), decoupled
    weight decay), computed here in float64.

    A first step with zero gradients isolates the weight decay: the update is zero, so each matrix is scaled by
    exactly 1 - lr * wd (one float32 multiplication). Three steps with random gradients follow.
    """
    model, optimizer = muon_from_the_command_line()
    lr, mu, wd = MUON_FLAGS["muon_lr"], MUON_FLAGS["muon_momentum"], MUON_FLAGS["muon_weight_decay"]
    params = dict(model.named_parameters())
    names = muon_parameters(model)
    before = {n: params[n].detach().clone() for n in names}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for n in names:
        torch.testing.assert_close(params[n].detach(), before[n] * (1 - lr * wd), rtol=2e-7, atol=0)
    g = torch.Generator().manual_seed(0)
    expected = {n: params[n].detach().double().clone() for n in names}
    buf = {n: torch.zeros_like(expected[n]) for n in names}
    travelled = dict.fromkeys(names, 0.0)
    start = {n: expected[n].clone() for n in names}
    for _ in range(3):
        grads = {n: torch.randn(p.shape, generator=g, dtype=torch.float64) for n, p in params.items()}
        for n, p in params.items():
            p.grad = grads[n].float()
        optimizer.step()
        for n in names:
            buf[n] = mu * buf[n] + grads[n]
            rows, cols = buf[n].shape
            step = lr * math.sqrt(max(1, rows / cols)) * newton_schulz(grads[n] + mu * buf[n])
            expected[n] = expected[n] * (1 - lr * wd) - step
            travelled[n] += step.norm().item()
    for n in names:
        moved, want = params[n].detach().double() - start[n], expected[n] - start[n]
        # PyTorch runs the five iterations in bfloat16 (about 0.4% per operation, amplified at small singular values):
        # measured at most 2.2% of the steps' lengths over 100 draws of gradients on these matrices (0.9% for this
        # one). Momentum 0.95 in place of 0.3 moves them by 27% or more, a wrong rate by tens of percent.
        assert (moved - want).norm() <= 0.05 * travelled[n], n


def test_the_update_is_near_orthogonal():
    """What Muon is for: whatever the gradient's spread of singular values, the update's lie near one (Jordan et al.
    2024)."""
    torch.manual_seed(0)
    grad = torch.randn(32, 64) @ torch.diag(torch.logspace(-3, 0, 64))
    param = torch.nn.Parameter(torch.zeros(32, 64))
    opt = torch.optim.Muon([param], lr=1.0, weight_decay=0.0, momentum=0.0, nesterov=False, adjust_lr_fn="original")
    param.grad = grad
    opt.step()
    singular = torch.linalg.svdvals(-param.detach().double())
    assert torch.linalg.svdvals(grad.double()).max() / torch.linalg.svdvals(grad.double()).min() > 100
    assert singular.min() > 0.3 and singular.max() < 1.5


@pytest.mark.parametrize("position", sorted(SCHEMES))
def test_muon_trains_the_block_matrices_and_adamw_the_rest(position):
    model = Decoder(
        DecoderConfig(vocab_size=64, context_length=16, d_model=16, n_heads=2, n_layers=2, position=position)
    )
    opt = make_optimizer(model, TrainOptions.of(optimizer="muon", position=position), torch.device("cpu"))
    muon, adamw = opt.optimizers
    names = {id(p): n for n, p in model.named_parameters()}
    on_muon = {names[id(p)] for group in muon.param_groups for p in group["params"]}
    on_adamw = {names[id(p)] for group in adamw.param_groups for p in group["params"]}
    assert on_muon == set(muon_parameters(model))
    assert on_muon | on_adamw == set(names.values()) and not on_muon & on_adamw
    assert all(
        n.startswith("blocks.") and n.endswith(".weight") and dict(model.named_parameters())[n].dim() == 2
        for n in on_muon
    )
    assert "token_embedding.weight" in on_adamw  # the table, and the tied head with it
    assert not any(n.startswith("positions.") for n in on_muon)


def test_the_adamw_side_is_plain_adamw():
    torch.manual_seed(0)
    model = Decoder(
        DecoderConfig(vocab_size=64, context_length=16, d_model=16, n_heads=2, n_layers=1, position="learned")
    )
    opts = TrainOptions.of(optimizer="muon", position="learned")
    opt = make_optimizer(model, opts, torch.device("cpu"))
    rest = {n: p for n, p in model.named_parameters() if n not in muon_parameters(model)}
    copies = {n: torch.nn.Parameter(p.detach().clone()) for n, p in rest.items()}
    decay = [copies[n] for n in copies if copies[n].dim() >= 2]
    no_decay = [copies[n] for n in copies if copies[n].dim() < 2]
    reference = torch.optim.AdamW(
        [{"params": decay, "weight_decay": opts.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=opts.learning_rate,
        betas=(opts.beta1, opts.beta2),
    )
    for _ in range(3):
        ids = torch.randint(0, 64, (2, 16))
        opt.zero_grad()
        model(ids).logsumexp(-1).mean().backward()
        for n, p in rest.items():
            copies[n].grad = p.grad.clone()
        opt.step()
        reference.step()
    for n, p in rest.items():
        torch.testing.assert_close(p.detach(), copies[n].detach())


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_the_token_table_takes_its_own_rate_on_the_schedule(optimizer):
    """--embedding-lr: torch's AdamW with the token table (the tied head) in a group of its own at that peak, every
    group on the same warm-up and cosine decay, the rest as before."""
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=64, context_length=16, d_model=16, n_heads=2, n_layers=1)
    model = Decoder(config)
    opts = TrainOptions.of(optimizer=optimizer, embedding_lr=0.03, max_steps=20, warmup_steps=2)
    opt = make_optimizer(model, opts, torch.device("cpu"))
    on_muon = muon_parameters(model) if optimizer == "muon" else []
    rest = {n: p for n, p in model.named_parameters() if n not in on_muon and n != "lm_head.weight"}
    copies = {n: torch.nn.Parameter(p.detach().clone()) for n, p in rest.items()}
    table = "token_embedding.weight"
    reference = torch.optim.AdamW(
        [
            {"params": [copies[n] for n in copies if copies[n].dim() >= 2 and n != table], "weight_decay": 1.0},
            {"params": [copies[n] for n in copies if copies[n].dim() < 2], "weight_decay": 0.0},
            {"params": [copies[table]], "weight_decay": 1.0},
        ],
        lr=opts.learning_rate,
        betas=(opts.beta1, opts.beta2),
    )
    for step in range(3):
        ids = torch.randint(0, 64, (2, 16))
        opt.zero_grad()
        model(ids).logsumexp(-1).mean().backward()
        for n, p in rest.items():
            copies[n].grad = p.grad.clone()
        lr = scheduled_lr(opt, step, opts)
        for group, peak in zip(reference.param_groups, [5e-3, 5e-3, 0.03], strict=True):
            group["lr"] = lr * peak / 5e-3
        opt.step()
        reference.step()
    assert lr > 0
    for n, p in rest.items():
        torch.testing.assert_close(p.detach(), copies[n].detach(), msg=n)


@given(step=st.integers(0, 1199), muon_lr=st.floats(1e-4, 0.1), lr=st.floats(1e-4, 1e-2))
def test_the_schedule_scales_to_each_optimizers_peak(step, muon_lr, lr):
    model = Decoder(DecoderConfig(vocab_size=64, context_length=16, d_model=16, n_heads=2, n_layers=1))
    opts = TrainOptions.of(optimizer="muon", muon_lr=muon_lr, learning_rate=lr, max_steps=1200)
    opt = make_optimizer(model, opts, torch.device("cpu"))
    adamw_lr = scheduled_lr(opt, step, opts)
    muon, adamw = opt.optimizers
    assert all(group["lr"] == adamw_lr for group in adamw.param_groups)
    assert all(math.isclose(group["lr"], adamw_lr * muon_lr / lr, rel_tol=1e-12) for group in muon.param_groups)


def test_state_dict_numbers_both_optimizers_as_one():
    model = Decoder(DecoderConfig(vocab_size=64, context_length=16, d_model=16, n_heads=2, n_layers=1))
    opt = make_optimizer(model, TrainOptions.of(optimizer="muon"), torch.device("cpu"))
    model(torch.randint(0, 64, (2, 16))).mean().backward()
    opt.step()
    state = opt.state_dict()
    flat = [p for group in opt.param_groups for p in group["params"]]
    assert sorted(state["state"]) == list(range(len(flat)))
    assert [i for g in state["param_groups"] for i in g["params"]] == list(range(len(flat)))
    for index, p in enumerate(flat):
        assert set(state["state"][index]) == (
            {"momentum_buffer"} if p.dim() == 2 and index < 4 else {"step", "exp_avg", "exp_avg_sq"}
        )
    fresh = make_optimizer(model, TrainOptions.of(optimizer="muon"), torch.device("cpu"))
    assert isinstance(fresh, MuonWithAdamW)
    fresh.load_state_dict(state)
    for index, p in enumerate(flat):
        for key, value in state["state"][index].items():
            assert torch.equal(fresh.state[p][key], value)


def test_ctrl_c_then_resume_with_muon_is_bitwise_identical(small_corpus, tmp_path):
    def options(out, **extra):
        return TrainOptions.of(text=[str(small_corpus)], out=str(out), **{**TINY, **extra})

    train(options(tmp_path / "whole", max_steps=12, save_every=0), QUIET)
    run = tmp_path / "run"

    def ctrl_c(step):
        if step == 6:
            os.kill(os.getpid(), signal.SIGINT)

    assert train(options(run, max_steps=12, save_every=5), QUIET, step_hook=ctrl_c)["interrupted"]
    resumed = train(TrainOptions(), QUIET, resume=run, given=set())
    assert resumed["resumed_from"] == 7 and resumed["steps"] == 12
    assert (run / "model.safetensors").read_bytes() == (tmp_path / "whole" / "model.safetensors").read_bytes()


def flags(**options) -> list[str]:
    return [x for k, v in options.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def test_a_run_made_without_muon_weight_decay_resumes_without_it(small_corpus, tmp_path, monkeypatch):
    """A run whose config.json says muon_weight_decay 0 (every Muon run before issue 53 made it the default 0.25)
    resumes with 0: the weights go on as they would have, not under today's default."""
    run = tmp_path / "before-53"
    argv = ["train", "--text", str(small_corpus), "--out", str(run), "--max-steps", "4", "--quiet", *flags(**TINY)]
    assert main([*argv, "--muon-weight-decay", "0"]) == 0
    built, real = [], torch.optim.Muon.__init__

    def spy(self, params, *args, **kwargs):
        built.append(kwargs["weight_decay"])
        real(self, params, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Muon, "__init__", spy)
    assert main(["train", "--resume", str(run), "--max-steps", "6", "--quiet"]) == 0
    assert built == [0.0]


def test_the_optimizer_round_trips_through_config_resume_and_init_from(small_corpus, tmp_path, capsys):
    run = tmp_path / "muon"
    assert (
        main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--out",
                str(run),
                "--max-steps",
                "6",
                "--muon-lr",
                "0.03",
                "--quiet",
                *flags(**TINY),
            ]
        )
        == 0
    )
    train_section = json.loads((run / "config.json").read_text())["train"]
    assert train_section["optimizer"] == "muon" and train_section["muon_lr"] == 0.03

    # a resumed run keeps its optimiser ...
    assert main(["train", "--resume", str(run), "--max-steps", "8", "--optimizer", "adamw", "--quiet"]) == 1
    assert "--optimizer adamw contradicts the run being resumed" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--max-steps", "8", "--quiet"]) == 0
    assert json.loads((run / "config.json").read_text())["train"]["optimizer"] == "muon"

    # ... and a fine-tune chooses its own
    tuned = tmp_path / "tuned"
    assert (
        main(
            [
                "train",
                "--init-from",
                str(run),
                "--text",
                str(small_corpus),
                "--out",
                str(tuned),
                "--max-steps",
                "4",
                "--optimizer",
                "adamw",
                "--batch-size",
                "4",
                "--eval-interval",
                "5",
                "--eval-blocks",
                "4",
                "--final-eval-blocks",
                "8",
                "--sample-tokens",
                "0",
                "--threads",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    assert json.loads((tuned / "config.json").read_text())["train"]["optimizer"] == "adamw"


@pytest.mark.parametrize("option, value", [("muon_lr", "0.05"), ("muon_momentum", "0.9"), ("muon_weight_decay", "0.1")])
def test_muon_options_mean_nothing_to_adamw(tmp_path, capsys, option, value):
    flag = f"--{option.replace('_', '-')}"
    assert main(["train", "--out", str(tmp_path / "run"), "--optimizer", "adamw", flag, value, "--max-steps", "2"]) == 1
    err = capsys.readouterr().err
    assert f"{flag} {value} means nothing with --optimizer adamw" in err and "add --optimizer muon" in err
    assert not (tmp_path / "run").exists()


def test_the_task_study_trains_with_the_optimizer_it_is_given():
    from octlm.studies.tasks.generators import TASKS
    from octlm.studies.tasks.options import TaskOptions

    opts = TaskOptions(task="copy", optimizer="muon", muon_lr=0.01)
    train_opts = opts.train_options(TASKS["copy"], "rope", 0)
    assert train_opts.optimizer == "muon" and train_opts.muon_lr == 0.01


def test_the_default_muon_decays_the_blocks_matrices_as_the_default_adamw_does():
    """Issue 53: Muon without weight decay fell behind AdamW on text read 21 times over. The default's rule is that a
    block matrix shrinks per step at the peak by what AdamW's default shrinks it, lr x wd (Loshchilov & Hutter 2019's
    decoupled decay; torch.optim.Muon's decay is lr x wd too): one step with zero gradients, where the update is zero,
    scales each matrix by 1 - 0.005, whichever optimizer the defaults build."""
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=64, context_length=16, d_model=16, n_heads=2, n_layers=1))
    names = muon_parameters(model)
    shrink = {}
    for optimizer in ("muon", "adamw"):
        trial = copy.deepcopy(model)
        params = dict(trial.named_parameters())
        before = {n: params[n].detach().clone() for n in names}
        for p in trial.parameters():
            p.grad = torch.zeros_like(p)
        make_optimizer(trial, TrainOptions.of(optimizer=optimizer), torch.device("cpu")).step()
        shrink[optimizer] = {n: (params[n].detach() / before[n]).mean().item() for n in names}
    defaults = TrainOptions()
    assert defaults.muon_lr * defaults.muon_weight_decay == pytest.approx(
        defaults.learning_rate * defaults.weight_decay
    )
    for n in names:
        assert shrink["muon"][n] == pytest.approx(1 - 0.02 * 0.25, abs=1e-6)
        assert shrink["muon"][n] == pytest.approx(shrink["adamw"][n], abs=1e-6)


def test_the_task_study_keeps_muon_without_weight_decay_and_runs_with_adamw():
    """The task study trains without weight decay on every parameter (its recipe: decay pulls back the few weights a
    task needs), so octlm train's new Muon default does not reach it; with --optimizer adamw its models' options pass
    octlm train's check (its own Muon default of 0 is no Muon flag given to AdamW)."""
    from octlm.studies.tasks.generators import TASKS
    from octlm.studies.tasks.options import TaskOptions
    from octlm.train.option_checks import check_options

    assert TaskOptions(task="copy").train_options(TASKS["copy"], "rope", 0).muon_weight_decay == 0.0
    adamw = TaskOptions(task="copy", optimizer="adamw").train_options(TASKS["copy"], "rope", 0)
    check_options(adamw)
    assert adamw.optimizer == "adamw"

    from octlm.cli.commands.length import study_options
    from octlm.cli.program import build_parser

    def parsed(*argv):
        args = build_parser().parse_args(["length", *argv, "--out", "study"])
        args.argv = ["length", *argv, "--out", "study"]
        return study_options(args)

    # one flag serves both studies: its default is each study's own, and a value given reaches the task study
    assert parsed("--task", "copy").muon_weight_decay == 0.0
    assert parsed("--text", "x").muon_weight_decay == TrainOptions().muon_weight_decay == 0.25
    assert parsed("--task", "copy", "--muon-weight-decay", "0.3").muon_weight_decay == 0.3


def test_the_length_study_hands_the_optimizer_to_every_model(tmp_path):
    from octlm.studies.length.options import LengthOptions

    opts = LengthOptions(text=["x"], optimizer="muon", muon_lr=0.01)
    train_opts = opts.train_options("alibi", Path(tmp_path), 0)
    assert train_opts.optimizer == "muon" and train_opts.muon_lr == 0.01


def test_muon_is_the_default_of_octlm_train_the_text_study_and_its_fine_tunes(tmp_path, monkeypatch):
    """Muon won the main job (1.5204 against 1.6283 bits per byte); the text study, remeasured with it, takes the same
    default, and so do its fine-tunes."""
    import octlm.train.init_from
    from octlm.cli.commands.length import study_options
    from octlm.cli.program import build_parser
    from octlm.studies.length.extension import extension_options
    from octlm.studies.length.options import LengthOptions

    assert TrainOptions().optimizer == "muon"
    argv = ["length", "--text", "x", "--out", str(tmp_path / "study")]
    args = build_parser().parse_args(argv)
    args.argv = argv
    opts = study_options(args)
    assert isinstance(opts, LengthOptions) and opts.optimizer == "muon"
    assert opts.train_options("rope", tmp_path / "rope").optimizer == "muon"
    # no source run needed here
    monkeypatch.setattr(octlm.train.init_from, "init_from_options", lambda opts, given: opts)
    assert extension_options(opts, "rope+yarn", tmp_path / "source", tmp_path / "tuned", 0).optimizer == "muon"


def test_a_fine_tune_trains_with_muon_by_default(small_corpus, tmp_path):
    source, tuned = tmp_path / "source", tmp_path / "tuned"
    tiny = flags(**{k: v for k, v in TINY.items() if k != "optimizer"})
    assert (
        main(
            [
                "train",
                "--text",
                str(small_corpus),
                "--out",
                str(source),
                "--max-steps",
                "2",
                "--optimizer",
                "adamw",
                "--quiet",
                *tiny,
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "train",
                "--init-from",
                str(source),
                "--text",
                str(small_corpus),
                "--out",
                str(tuned),
                "--max-steps",
                "2",
                "--quiet",
                *flags(
                    **{
                        k: v
                        for k, v in TINY.items()
                        if k not in ("optimizer", "vocab_size", "d_model", "n_heads", "n_layers")
                    }
                ),
            ]
        )
        == 0
    )
    assert json.loads((tuned / "config.json").read_text())["train"]["optimizer"] == "muon"


@pytest.mark.slow
def test_the_optimizers_benchmark_compares_both_and_finds_the_steps_to_reach(small_corpus):
    import subprocess
    import sys

    tiny = flags(**{k: v for k, v in TINY.items() if k not in ("optimizer", "eval_interval", "sample_tokens")})
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[1] / "bench" / "optimizers.py"),
            "--parts",
            "main",
            "reach",
            "--main-steps",
            "8",
            "--reach-steps",
            "2",
            "8",
            "--",
            "--text",
            str(small_corpus),
            *tiny,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    main_part, reach = result["main"], result["reach"]
    assert main_part["adamw"]["steps"] == main_part["muon"]["steps"] == 8
    assert main_part["muon_step_cost"] == pytest.approx(
        main_part["adamw"]["tokens_per_second"] / main_part["muon"]["tokens_per_second"], abs=1e-3
    )
    assert [row["steps"] for row in reach["muon_runs"]] == [2, 8]
    reached = [row["steps"] for row in reach["muon_runs"] if row["val_bpb"] <= reach["adamw_val_bpb"]]
    assert reach["steps_to_reach_adamw"] == (min(reached) if reached else None)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_the_extension_stage_fine_tunes_with_the_studys_optimizer(tmp_path, monkeypatch, optimizer):
    """A fine-tune's rates fall together: Muon's keeps its ratio to AdamW's; with AdamW alone Muon's option stays
    unset."""
    import octlm.train.init_from
    from octlm.studies.length.extension import extension_options
    from octlm.studies.length.options import LengthOptions
    from octlm.train.option_checks import check_options

    # no source run needed here
    monkeypatch.setattr(octlm.train.init_from, "init_from_options", lambda opts, given: opts)
    opts = LengthOptions(text=["x"], optimizer=optimizer, schemes=["rope"])
    tuned = extension_options(opts, "rope+yarn", tmp_path / "source", tmp_path / "tuned", 0)
    check_options(tuned)  # a refused Muon option would stop the stage here
    assert tuned.optimizer == optimizer
    expected = 0.02 * opts.extend_learning_rate / opts.learning_rate if optimizer == "muon" else 0.02
    assert tuned.muon_lr == pytest.approx(expected)


@pytest.mark.parametrize(
    "flags_given, refused",
    [
        (["--muon-weight-decay", "50"], "--muon-lr 0.02 x --muon-weight-decay 50 = 1:"),
        (["--muon-weight-decay", "1e9"], "--muon-lr 0.02 x --muon-weight-decay 1e+09 = 2e+07:"),
        (["--muon-lr", "0.5", "--muon-weight-decay", "2"], "--muon-lr 0.5 x --muon-weight-decay 2 = 1:"),
        (["--weight-decay", "200"], "--learning-rate 0.005 x --weight-decay 200 = 1:"),
        (["--optimizer", "adamw", "--weight-decay", "300"], "--learning-rate 0.005 x --weight-decay 300 = 1.5:"),
        (["--muon-weight-decay", "49"], None),
        (["--optimizer", "adamw", "--weight-decay", "199"], None),
        (["--learning-rate", "1e6"], "--learning-rate 1e+06 x --weight-decay 1 = 1e+06:"),
        (["--learning-rate", "1e6", "--weight-decay", "0"], None),
    ],
)
def test_a_weight_decay_that_would_zero_the_matrices_is_refused_before_anything_is_written(flags_given, refused):
    """Decoupled decay scales a matrix by 1 - lr x wd per step: at lr x wd >= 1 nothing is left of it (a new user's
    trial: --muon-weight-decay 1e9 ended in NaN with a message blaming --learning-rate, and a run folder left)."""
    from octlm.cli import build_parser, options_from
    from octlm.errors import OctlmError
    from octlm.train.option_checks import check_options

    opts = options_from(build_parser().parse_args(["train", "--out", "x", *flags_given]), TrainOptions)
    if refused is None:
        check_options(opts)
        return
    with pytest.raises(OctlmError, match="zeroes it or flips its sign") as err:
        check_options(opts)
    assert str(err.value).startswith(refused)


def test_the_task_study_refuses_a_muon_flag_given_with_adamw(tmp_path, capsys):
    """As octlm train does: the study's models leave Muon's options out under AdamW, so the study checks them itself,
    against its own defaults (a new user's trial found --muon-weight-decay 0.1 accepted and recorded)."""
    out = tmp_path / "study"
    argv = ["length", "--task", "copy", "--optimizer", "adamw", "--schemes", "rope", "--out", str(out)]
    assert main([*argv, "--muon-weight-decay", "0.1"]) == 1
    assert "--muon-weight-decay 0.1 means nothing with --optimizer adamw" in capsys.readouterr().err
    assert main([*argv, "--muon-lr", "0.5"]) == 1
    assert "--muon-lr 0.5 means nothing with --optimizer adamw" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("option, value", [("muon_weight_decay", "0.3"), ("muon_lr", "0.05")])
def test_resuming_an_adamw_run_with_a_muon_flag_says_only_muon_reads_it(small_corpus, tmp_path, capsys, option, value):
    """An AdamW run's config.json keeps Muon's defaults, unread: a Muon flag on --resume is refused for what it is,
    not as contradicting a value the run never used (a new user's trial), and --muon-lr is not re-tuned in silence."""
    run = tmp_path / "adamw"
    argv = ["train", "--text", str(small_corpus), "--out", str(run), "--max-steps", "4", "--quiet", *flags(**TINY)]
    assert main([*argv, "--optimizer", "adamw"]) == 0
    capsys.readouterr()
    given = f"--{option.replace('_', '-')}"
    assert main(["train", "--resume", str(run), "--max-steps", "6", given, value, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{given} {value} means nothing to the run being resumed: it trains with --optimizer adamw" in err
    assert "contradicts" not in err
