"""Fixtures for invar-io's `.npy` row writer test (`tests/npy_rows.rs`), made with numpy 1.26.4.

`numpy_3x4.npy`: `np.save` of a 3 x 4 float32 matrix (values below). numpy pads its header with
room for the shape to grow, so its header differs from invar's in spaces and in the shape's
spelling (`(3, 4)` against npyz's `(3, 4, )`); the test checks the dict entries and the data bytes.

The script also checks that numpy reads invar's spelling: the file invar writes for the same
matrix (built here by the format specification's rules) loads to the same values.
"""

import io

import numpy as np

VALUES = np.array(
    [[0.0, -1.5, 2.25, 1e-30], [3.0e30, -0.0, 7.0, 0.1], [1.0, 2.0, 3.0, 4.0]],
    dtype=np.float32,
)

np.save("numpy_3x4.npy", VALUES)

dict_text = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4, ), }"
dict_text += " " * (63 - (10 + len(dict_text)) % 64) + "\n"
invar_bytes = (
    b"\x93NUMPY\x01\x00"
    + len(dict_text).to_bytes(2, "little")
    + dict_text.encode()
    + VALUES.astype("<f4").tobytes()
)
back = np.load(io.BytesIO(invar_bytes))
assert back.dtype == np.float32 and back.shape == (3, 4)
assert np.array_equal(back, VALUES)
print("numpy reads invar's header spelling")
