"""CPU spectral operators (DFT, STFT, MelWeightMatrix): the operator library's
(:mod:`onyxrt_ops.signal`), bound over numpy in ``kernels/__init__``; the CPU keeps no
override. Timed against the CPU's former numpy kernels (``kernel.compute``, best of 9):
small transforms (a [2, 8] real DFT, half types) 0.95–1.08×, a [16, 512] DFT and the mel
matrix 1.0×, a [4, 16000] complex STFT 0.72× (``numpy.fft`` dominates the large ones).
"""
