// pybind11 glue only: expose the backend class and the creator function that
// torch.distributed calls (extended API) for backend="ucxcoll".

#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <ucp/api/ucp.h>

#include "backend/future_completer.hpp"
#include "backend/ucx_backend.hpp"
#include "common/config.hpp"

namespace py = pybind11;

namespace {

c10::intrusive_ptr<c10d::Backend> createBackend(const c10d::DistributedBackendOptions& options) {
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout);
  return c10::make_intrusive<ucxcoll::UcxBackend>(options.store, options.group_rank, options.group_size, timeout,
                                                  options.group_id);
}

std::string ucxVersion() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

void stopProgressThreadAtExit() {
  ucxcoll::Engine::stopLiveEngine(std::chrono::milliseconds(ucxcoll::config().exitGraceMilliseconds));
  // After the engine: it completed (or aborted) every Work, whose Futures
  // the completer's threads now finish before they stop.
  ucxcoll::FutureCompleter::instance().stop();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ucxcoll: a torch.distributed backend over UCX";
  py::class_<ucxcoll::UcxBackend, c10d::Backend, c10::intrusive_ptr<ucxcoll::UcxBackend>>(m, "UcxBackend")
      .def_property_readonly("channel", &ucxcoll::UcxBackend::channel,
                             "This process's tag channel for the group (see docs/ARCHITECTURE.md).");
  m.def("create_backend", &createBackend, py::arg("dist_backend_options"), py::call_guard<py::gil_scoped_release>(),
        "Create the backend for one process group (called by torch.distributed).");
  m.def("ucx_version", &ucxVersion, "Version of the UCX library loaded at run time.");
  m.def("_stop_progress_thread", &stopProgressThreadAtExit, py::call_guard<py::gil_scoped_release>(),
        "Python atexit: let pending collectives finish (UCXCOLL_EXIT_GRACE_MS), then stop the progress thread.");
}
