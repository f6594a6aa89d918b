"""The typer command line: parses options, calls analyses, hands results to renderers."""

import os

# Arrow's allocator for every command, chosen before pyarrow is first imported (its C++ default
# pool is fixed then: ``pa.set_memory_pool`` changes only pyarrow's own, not the one the Parquet
# writer and the compute kernels take): the C library's, which hands freed batches back to the
# kernel where mimalloc kept them. salvage's peak RSS grew with the store (2 GB crashed synth
# store: 206 -> 179 MiB; 172 at 0.25 GB). ARROW_DEFAULT_MEMORY_POOL still chooses.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
