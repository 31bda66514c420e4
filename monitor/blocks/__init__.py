"""Block work: independent blocks run in this process or on Dask workers, merged in a fixed order.

:mod:`monitor.blocks.workers` is the only module that imports Dask. In this process a matrix's
row blocks are :class:`monitor.disclosure.matrix_scan.InMemoryRows`; on workers they are
:class:`monitor.blocks.workers.DaskRows`; both map a row function over the same blocks and
return the results in row order, so the merged figures are the same bits.
"""
