#pragma once
// Which kernels the ops run: the fast ones (default) or the plain reference loops in this folder.
// Set NORMLAB_KERNELS=reference in the environment to make every normlab verb use the reference
// kernels (slower, but each line of the math can be stepped through in a debugger);
// NORMLAB_KERNELS=fast (or unset, or empty) selects the fast kernels.
namespace normlab::kernels::reference {

// Reads NORMLAB_KERNELS on every call, so a test can switch it with setenv. Throws
// normlab::InputError naming NORMLAB_KERNELS for any other value.
bool reference_kernels_enabled();

}  // namespace normlab::kernels::reference
