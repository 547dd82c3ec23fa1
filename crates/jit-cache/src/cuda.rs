//! Loading cached artifacts on a GPU through cudarc (feature `cuda`).
//!
//! cudarc is built with `dynamic-loading`: libcuda is opened at run time. `CudaContext::new`
//! panics when the library is missing, so [`cuda_available`] checks for it first and every entry
//! point returns [`Error::Gpu`] instead of panicking on a machine without a driver.

use crate::build::entry::Artifact;
use crate::error::{Error, Result};
use std::sync::Arc;

pub use cudarc::driver::{CudaContext, CudaFunction, CudaModule};

/// Whether libcuda can be loaded on this machine.
pub fn cuda_available() -> bool {
    ["libcuda.so.1", "libcuda.so"].iter().any(|name| {
        let Ok(cname) = std::ffi::CString::new(*name) else {
            return false;
        };
        // SAFETY: dlopen with a valid NUL-terminated name; the handle is closed at once. Loading
        // libcuda runs no user code beyond the driver's own initialisers.
        unsafe {
            let handle = libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if handle.is_null() {
                false
            } else {
                libc::dlclose(handle);
                true
            }
        }
    })
}

/// Opens a context on device `ordinal`, or says why none can be had.
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    if !cuda_available() {
        return Err(Error::Gpu {
            name: format!("device {ordinal}"),
            reason: "libcuda.so.1 not found (no NVIDIA driver on this machine)".into(),
        });
    }
    CudaContext::new(ordinal).map_err(|e| Error::Gpu {
        name: format!("device {ordinal}"),
        reason: e.to_string(),
    })
}

/// Loads an artifact (cubin, PTX or fatbin) as a module and returns the named function.
pub fn load_function(
    ctx: &Arc<CudaContext>,
    artifact: &Artifact,
    function: &str,
) -> Result<CudaFunction> {
    let gpu_err = |reason: String| Error::Gpu {
        name: function.to_string(),
        reason,
    };
    let module = match artifact.kind() {
        nvcc::OutputKind::Ptx => {
            let text = String::from_utf8(artifact.bytes().to_vec())
                .map_err(|e| gpu_err(format!("PTX is not UTF-8: {e}")))?;
            ctx.load_module(cudarc::nvrtc::Ptx::from_src(text))
        }
        _ => ctx.load_module(cudarc::nvrtc::Ptx::from_file(artifact.path())),
    }
    .map_err(|e| gpu_err(format!("load module {}: {e}", artifact.path().display())))?;
    module
        .load_function(function)
        .map_err(|e| gpu_err(format!("get function: {e}")))
}
