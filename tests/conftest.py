"""Shared test set-up: the repository root, and torch kept to the machine's cores."""
import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# `make test` runs a worker per core (pytest-xdist): each worker, and the notebooks and training runs it starts, get
# their share of the cores (OMP_NUM_THREADS), not two threads each: two workers of two threads on two cores (one more job
# beside them) made some tests 10-15x slower (GLUE's papermill test 250 s against 17 s alone). The
# fixture runs are cached per thread count (`fixture_run`), so a run a test trains at one thread is compared with a
# fixture trained at one.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, (os.cpu_count() or 2) // WORKERS))
if WORKERS > 1: os.environ["OMP_NUM_THREADS"] = str(THREADS)
else: THREADS = int(os.environ.setdefault("OMP_NUM_THREADS", str(THREADS)))  # one worker: the shell's count, if it set one
torch.set_num_threads(THREADS)


@pytest.fixture
def root():
    return ROOT


@pytest.fixture
def hub_offline(monkeypatch):
    """The Hugging Face hub offline, for `datasets` and `huggingface_hub` alike: their environment variables, and the
    constants they read those into on import (an earlier test may have imported them online, after which the variables
    alone leave each call waiting on the network for about 23 s before it fails)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1"); monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets, huggingface_hub
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if hasattr(datasets.config, name): monkeypatch.setattr(datasets.config, name, True)


@pytest.fixture(scope="module")
def fixture_copy(tmp_path_factory):
    "A copy of the fixture run (checkpoints, tokenizer, config) with a results database of its own, per test module."
    import shutil
    from embryo.train.fixtures import fixture_run
    dst = tmp_path_factory.mktemp("run") / "fixture"
    shutil.copytree(fixture_run(), dst, ignore=shutil.ignore_patterns("results.sqlite*", "figures", "resume", "logs"))
    return dst


# The fast lane (`make test-fast`, under 3 minutes) leaves out the tests measured at over 3 s each (`pytest --durations=0`
# on a fresh clone, 2026-11-26): those that train a model, run a notebook or a sweep. `make test` runs everything.
SLOW = {
    "test_ablations.py::test_downstream_scores_are_finetuned_cached_and_tabled",
    "test_ablations.py::test_notebook_writes_table6_with_paper_and_spread",
    "test_attention.py::test_papermill_one_step_then_rerun_is_idempotent",
    "test_attention.py::test_a_causal_series_is_measured_against_an_even_spread_over_the_visible_positions",  # 3.8 s
    "test_bad_input.py::test_bad_input_gives_one_line_with_the_file_and_the_fix",
    "test_corpus.py::test_hub_name_is_read_as_a_hub_dataset",
    "test_data.py::test_fetch_rebuilds_a_damaged_corpus",
    "test_docs.py::test_each_analysis_page_shows_its_committed_figures_and_verdicts",  # make docs: a site in about a minute
    "test_docs.py::test_front_page_is_index_and_every_notebook_has_a_page",
    "test_docs.py::test_nbdev_docs_processes_every_notebook",
    "test_electra.py::test_resume_is_bit_identical",
    "test_figures.py::test_measured_points_are_markers_and_no_line_crosses_an_unevaluated_checkpoint",  # each draws the figures of five bundles
    "test_figures.py::test_every_figure_that_marks_the_loss_drop_names_it_last",
    "test_figures.py::test_no_legend_covers_a_measured_point",
    "test_figures.py::test_fig4_first_head_and_loss_drop_are_told_apart",
    "test_figures.py::test_fig6_title_counts_the_relations_it_draws",
    "test_figures.py::test_no_y_label_is_clipped_and_the_similarity_label_fits_its_panel",
    "test_glue.py::test_builtin_cache_rebuilds_when_a_file_changes",
    "test_glue.py::test_builtin_step_is_stored_replaced_and_drawn",
    "test_glue.py::test_datasets_offline_gives_a_clear_error",
    "test_glue.py::test_notebook_runs_one_step_under_papermill",
    "test_glue.py::test_step_axes_show_step_0_and_every_marker_whole",  # draws what the slow tests above stored
    "test_glue.py::test_seeds_store_each_score_their_mean_and_spread_and_the_verdict_weighs_them",
    "test_hf_artifact.py::test_bert_twin_checkpoints_load_as_hf_artifacts",
    "test_lab.py::test_make_lab_serves_the_figures_a_results_cell_links",  # starts JupyterLab: 1.9 to 3.2 s here
    "test_llc.py::test_the_estimator_agrees_with_devinterp",  # trains a small GPT-2, runs both samplers
    "test_llc.py::test_a_checkpoint_reaches_the_database_with_its_chains_settings_and_calibration",
    "test_notebooks.py::test_analysis_notebook_on_other_run",
    "test_notebooks.py::test_notebook",
    "test_pretrain.py::test_a_run_without_a_checkpoint_may_be_reconfigured",
    "test_trust.py::test_a_run_that_explodes_without_a_nan_stops_before_saving_exploded_weights",
    "test_trust.py::test_the_report_names_a_copied_checkpoint",
    "test_pretrain.py::test_a_second_writer_is_refused_and_the_first_run_is_untouched",
    "test_pretrain.py::test_compiled_training_matches_eager_and_resumes_bit_identically",
    "test_pretrain.py::test_ctrl_c_is_one_line_and_the_same_command_goes_on",
    "test_pretrain.py::test_divergence_message_names_a_command_that_works",
    "test_pretrain.py::test_divergence_never_saves_non_finite_weights_and_its_advice_trains_again",
    "test_pretrain.py::test_divergence_stops_with_a_clear_message",
    "test_pretrain.py::test_sigkill_and_resume_is_bit_identical",
    "test_pretrain.py::test_bench_kill_resume_compares_a_whole_run_with_its_killed_twin",
    "test_pretrain.py::test_tensorboard_log_holds_what_train_jsonl_holds_and_changes_nothing",
    "test_pretrain.py::test_torchrun_two_processes_equals_one",
    "test_probing.py::test_ontonotes_tasks_run_and_figures_say_what_is_absent",
    "test_probing.py::test_papermill_one_step_then_rerun_is_idempotent",
    "test_readme.py::test_readme_in_sync_with_index",
    "test_reconstruction.py::test_figures_from_several_steps",
    "test_reconstruction.py::test_papermill_one_step_then_rerun_is_idempotent",
    "test_results.py::test_processes_creating_one_database_together_all_get_in",
    "test_squad.py::test_datasets_offline_gives_a_clear_error",
    "test_squad.py::test_notebook_runs_one_step_under_papermill",
    "test_squad.py::test_sweep_runs_squad_with_its_folder_and_reproduce_skips_it",
    "test_sweep.py::test_a_killed_papermill_sweeps_temporary_notebook_is_removed_by_the_rerun",
    "test_sweep.py::test_cli_exit_status_reports_failures",
    "test_sweep.py::test_eight_parallel_writers_lose_and_duplicate_nothing",
    "test_sweep.py::test_failure_is_logged_and_the_rest_goes_on",
    "test_sweep.py::test_interrupted_sweep_resumes_with_what_is_left",
    "test_sweep.py::test_papermill_and_inprocess_give_the_same_numbers",
    "test_sweep.py::test_papermill_parameters_are_checked_by_name",
    "test_sweep.py::test_papermill_sweep_leaves_no_kernel_and_the_working_directory_alone",
    "test_sweep.py::test_report_shows_figures_with_paper_numbers_and_verdicts",
    "test_sweep.py::test_results_remember_their_options_and_other_options_recompute",
    "test_sweep.py::test_shards_write_their_own_files_and_merge_without_loss",
    "test_sweep.py::test_report_leaves_the_bundle_it_reads_as_it_was",
    "test_sweep.py::test_pages_run_two_at_a_time_and_come_back_in_the_order_asked",
}


def pytest_collection_modifyitems(config, items):
    "Mark the slow tests (every notebook run, the series trained with transformers, and SLOW) so that `-m 'not slow'` leaves them out."
    for item in items:
        test = item.nodeid.split("[")[0].removeprefix("tests/")
        if test in SLOW or test.startswith(("test_notebooks.py::", "test_series.py::")): item.add_marker(pytest.mark.slow)
