"""CPU recurrent layers (RNN, GRU, LSTM): the operator library's (:mod:`onyxrt_ops.recurrent`),
bound over numpy in ``kernels/__init__``; the CPU keeps no override.

Timed against the CPU's former numpy kernels (``kernel.compute``, float32, best of 7 × 20
runs): [seq 50, batch 1, input 64, hidden 128] with bias — LSTM 1281 µs vs 1450 µs, GRU
802 µs vs 945 µs, RNN 207 µs vs 250 µs; bidirectional [seq 20, batch 4, input 16, hidden
32] with ragged ``sequence_lens`` — LSTM 1207 µs vs 1356 µs, GRU 758 µs vs 868 µs. The
library folds the recurrence bias into the input projection, casts nothing per step and
indexes the layout instead of transposing it.
"""
