/* The wire facts are enum constants in mrc_wire.h; this file only reports the layout
 * version the module was built with (mrcnic/wire/layout.py LAYOUT_VERSION). */
#include "mrc_wire.h"

int mrc_wire_layout_version(void) { return MRC_WIRE_LAYOUT_VERSION; }
