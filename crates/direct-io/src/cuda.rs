//! A sink that uploads streamed slots to a CUDA device: the slots are page-locked with
//! `cuMemHostRegister`, each piece is copied with `cuMemcpyHtoDAsync` on one stream, and an
//! event recorded after a slot's copies is what `wait` synchronises on before the slot is reused.

use crate::{Sink, SinkError};
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtrMut};
use std::sync::Arc;

/// Streams ranges (or a checkpoint's tensors) into one device buffer per range.
pub struct CudaSink {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    buffers: Vec<CudaSlice<u8>>,
    events: Vec<Option<CudaEvent>>,
    pinned: Vec<*mut std::ffi::c_void>,
}

impl std::fmt::Debug for CudaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaSink")
            .field("buffers", &self.buffers.len())
            .field("pinned_slots", &self.pinned.len())
            .finish()
    }
}

/// Whether the CUDA driver library can be loaded, checked with `dlopen("libcuda.so.1")`
/// (cudarc panics when it is missing, so this is checked first).
pub fn cuda_driver_available() -> Result<(), SinkError> {
    let name = c"libcuda.so.1";
    // SAFETY: dlopen with a valid NUL-terminated name; the handle is closed below.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns null or a valid C string owned by the loader.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_string()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(SinkError::new(format!(
            "CUDA is unavailable: dlopen libcuda.so.1 failed ({why}); install the NVIDIA driver \
             or use a host sink"
        )));
    }
    // SAFETY: closing the handle opened above, once.
    unsafe { libc::dlclose(handle) };
    Ok(())
}

fn driver(what: &str, e: result::DriverError) -> SinkError {
    SinkError::with_source(format!("CUDA {what}"), e)
}

impl CudaSink {
    /// Creates a context on device `ordinal` and one zeroed device buffer per length. Returns an
    /// error (never panics) when libcuda is missing or the device cannot be used.
    pub fn new(
        ordinal: usize,
        lengths: impl IntoIterator<Item = u64>,
    ) -> Result<CudaSink, SinkError> {
        cuda_driver_available()?;
        let ctx = CudaContext::new(ordinal).map_err(|e| driver("create context", e))?;
        let stream = ctx.new_stream().map_err(|e| driver("create stream", e))?;
        let mut buffers = Vec::new();
        for len in lengths {
            buffers.push(
                stream
                    .alloc_zeros::<u8>(len as usize)
                    .map_err(|e| driver("allocate device buffer", e))?,
            );
        }
        Ok(CudaSink {
            ctx,
            stream,
            buffers,
            events: Vec::new(),
            pinned: Vec::new(),
        })
    }

    /// The device buffers, one per range.
    pub fn buffers(&self) -> &[CudaSlice<u8>] {
        &self.buffers
    }

    /// The stream the copies run on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl Sink for CudaSink {
    fn attach_slots(&mut self, slots: &[&[u8]]) -> Result<(), SinkError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver("bind context", e))?;
        self.events.clear();
        for s in slots {
            let ptr = s.as_ptr() as *mut std::ffi::c_void;
            // SAFETY: the stream keeps each slot alive and unmoved until detach_slots, which
            // unregisters it; the driver only page-locks the range and never writes it.
            unsafe { sys::cuMemHostRegister_v2(ptr, s.len(), 0) }
                .result()
                .map_err(|e| driver("page-lock a slot (cuMemHostRegister)", e))?;
            self.pinned.push(ptr);
            self.events.push(None);
        }
        Ok(())
    }

    fn copy(
        &mut self,
        slot: usize,
        range: usize,
        offset_in_range: u64,
        bytes: &[u8],
    ) -> Result<(), SinkError> {
        let buf = self
            .buffers
            .get_mut(range)
            .ok_or_else(|| SinkError::new(format!("no device buffer for range {range}")))?;
        if offset_in_range + bytes.len() as u64 > buf.len() as u64 {
            return Err(SinkError::new(format!(
                "piece of range {range} at {offset_in_range} (+{}) overruns its device buffer",
                bytes.len()
            )));
        }
        let (dst, _record) = buf.device_ptr_mut(&self.stream);
        // SAFETY: dst + offset .. + len lies in the allocation (checked above); the stream
        // guarantees `bytes` stays valid and unchanged until wait(slot), which synchronises on
        // the event recorded after this copy.
        unsafe { result::memcpy_htod_async(dst + offset_in_range, bytes, self.stream.cu_stream()) }
            .map_err(|e| driver("cuMemcpyHtoDAsync", e))?;
        let event = self
            .ctx
            .new_event(None)
            .map_err(|e| driver("create event", e))?;
        event
            .record(&self.stream)
            .map_err(|e| driver("record event", e))?;
        if let Some(e) = self.events.get_mut(slot) {
            *e = Some(event);
        }
        Ok(())
    }

    fn wait(&mut self, slot: usize) -> Result<(), SinkError> {
        if let Some(event) = self.events.get_mut(slot).and_then(Option::take) {
            event
                .synchronize()
                .map_err(|e| driver("synchronize slot event", e))?;
        }
        Ok(())
    }

    fn detach_slots(&mut self) -> Result<(), SinkError> {
        for ptr in self.pinned.drain(..) {
            // SAFETY: ptr was registered in attach_slots and every copy from it was waited for.
            unsafe { sys::cuMemHostUnregister(ptr) }
                .result()
                .map_err(|e| driver("unregister a slot (cuMemHostUnregister)", e))?;
        }
        Ok(())
    }
}
