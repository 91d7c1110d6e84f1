"""The run store, one module per idea, each name re-exported here (`from opd import store; store.read_table(...)`):
- files: atomic writes (temporary name, then rename) and reads that check columns and dtypes (the Parquet contract);
- runs: the self-checking cache of runs (inspect, prepare, the set-aside store, the ledger, heal_runs)."""
from opd.store.files import (
    STEPS, HELDOUT, SCHEMAS, ADDED, OPTIONAL, FINITE, SchemaError, DamagedFile, DiskFull, mount_point,
    disk_full_error, atomic_write, parquet_options, INPUTS_KEY, write_table, rewrite_table, read_inputs, read_table, write_json,
    read_json, atomic_torch_save,
)
from opd.store.runs import (
    is_complete, RUN_FILES, CHECKPOINT, ATTEMPTS, PROBE_FILES, ALL_RUN_FILES, file_records, record_files,
    parquet_problem, foreign_rows, record_problems, spec_problems, check_run, BASE_FILES, BASE_CURVES, WeightsDiffer,
    pinned_weights, check_pinned, quarantine, another_invocation, ledger_path, read_ledger, write_ledger, Found,
    inspect, inspect_all, say_found, unreadable,
    SET_ASIDE, set_aside_root, set_aside_dir, prepare, kept, restore, set_aside_entries, prune_set_aside, PENDING,
    heal_runs, record_legacy, rewrite_tables, missing_weights, require_weights, quarantine_log,
)
