"""What explore writes: tables, CSV files, plots and the frozen result records of the Python API.

May import: explore.search, explore.execution and every stage below explore."""
