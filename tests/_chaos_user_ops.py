"""A user op with a wrong VJP (the chaos review's ``bad_double``): 2x whose gradient says 3."""

import gradspec as gs

bad_double = gs.Op("chaos_bad_double", forward=lambda x: 2 * x, vjp=lambda g, x, out: (3 * g,))
