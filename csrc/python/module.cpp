// pybind11 glue only: expose the backend class and the creator function that
// torch.distributed calls (extended API) for backend="ucxcoll".

#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <ucp/api/ucp.h>

#include <optional>
#include <vector>

#include "backend/device_router.hpp"
#include "backend/future_completer.hpp"
#include "backend/ucx_backend.hpp"
#include "common/config.hpp"

namespace py = pybind11;

namespace {

// The GPU backend of a group: ucxcoll._registration._make_gpu_backend
// (torch's ProcessGroupNCCL), looked up at each call so that tests on
// machines without a GPU can put a recording backend in its place. Called
// with the GIL released, from whichever thread made the first CUDA call;
// holds the GIL only while in Python.
c10::intrusive_ptr<c10d::Backend> makeGpuBackend(const ucxcoll::GpuGroupSpec& spec) {
  py::gil_scoped_acquire gil;
  try {
    py::object make = py::module_::import("ucxcoll._registration").attr("_make_gpu_backend");
    py::object backend = make(spec.store, spec.rank, spec.size, spec.timeout.count(), spec.groupName, spec.globalRanks);
    // A new reference for C++; the Python object keeps its own.
    return c10::intrusive_ptr<c10d::Backend>::unsafe_reclaim_from_nonowning(backend.cast<c10d::Backend*>());
  } catch (py::error_already_set& error) {
    // Type and message, without the traceback that what() appends.
    const std::string type = py::str(error.type().attr("__name__"));
    const std::string message = py::str(error.value());
    TORCH_CHECK(false, "ucxcoll: cannot create the NCCL backend that CUDA tensors of group \"", spec.groupName,
                "\" go to: ", type, ": ", message);
  } catch (py::cast_error& error) {
    TORCH_CHECK(false,
                "ucxcoll: the GPU backend factory returned something that is not a c10d Backend: ", error.what());
  }
}

// `parent`: the default group's backend when it is ucxcoll (else null):
// a group whose ranks are all in it is made from its connections, without
// the store (UcxBackend::makeSubgroup).
c10::intrusive_ptr<c10d::Backend> createBackend(const c10d::DistributedBackendOptions& options,
                                                ucxcoll::DeviceRouter* parent) {
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout);
  std::vector<uint64_t> globalRanks(options.global_ranks_in_group.begin(), options.global_ranks_in_group.end());
  const std::optional<std::vector<int>> parentRanks =
      parent != nullptr && !globalRanks.empty() ? parent->cpuBackend().ranksOf(globalRanks) : std::nullopt;
  c10::intrusive_ptr<ucxcoll::UcxBackend> cpu;
  if (parentRanks) {
    cpu = parent->cpuBackend().makeSubgroup(*parentRanks, options.group_id, timeout, options.store);
  } else {
    cpu = c10::make_intrusive<ucxcoll::UcxBackend>(options.store, options.group_rank, options.group_size, timeout,
                                                   options.group_id, globalRanks);
  }
  ucxcoll::GpuGroupSpec spec{options.store, options.group_rank, options.group_size,
                             timeout,       options.group_id,   std::move(globalRanks)};
  return c10::make_intrusive<ucxcoll::DeviceRouter>(std::move(cpu), makeGpuBackend, std::move(spec));
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
  py::class_<ucxcoll::DeviceRouter, c10d::Backend, c10::intrusive_ptr<ucxcoll::DeviceRouter>>(m, "UcxcollBackend")
      .def_property_readonly(
          "channel", [](ucxcoll::DeviceRouter& self) { return self.cpuBackend().channel(); },
          "This process's tag channel for the group's CPU (UCX) side (see docs/ARCHITECTURE.md).")
      .def_property_readonly(
          "_gpu_backend",
          [](ucxcoll::DeviceRouter& self) -> py::object {
            c10::intrusive_ptr<c10d::Backend> gpu = self.gpuBackendIfCreated();
            return gpu ? py::cast(gpu) : py::none();
          },
          "The backend CUDA tensors went to (torch's ProcessGroupNCCL), or None while none has come.")
      .def(
          "_start_flight_recording",
          [](ucxcoll::DeviceRouter& self, std::string name, std::string description, std::vector<uint64_t> ranks) {
            self.cpuBackend().flightRecording().start(std::move(name), std::move(description), std::move(ranks));
          },
          py::arg("group_name"), py::arg("group_desc"), py::arg("global_ranks"),
          "Write this group's CPU operations into torch's flight recorder (backend \"ucxcoll\") from now on; "
          "called once torch has named the group.")
      .def(
          "perform_nocolor_split", [](ucxcoll::DeviceRouter&, const at::Device&) {},
          "Called by torch on ranks outside a new group when the default group has a bound device. ucxcoll never "
          "makes a group's NCCL communicator by splitting its parent's, so there is nothing to take part in.");
  m.def(
      "create_backend",
      [](const c10d::DistributedBackendOptions& options, py::object parent) {
        ucxcoll::DeviceRouter* router = parent.is_none() ? nullptr : parent.cast<ucxcoll::DeviceRouter*>();
        // The caller's reference keeps `parent` alive while this runs.
        py::gil_scoped_release released;
        return createBackend(options, router);
      },
      py::arg("dist_backend_options"), py::arg("parent") = py::none(),
      "Create the backend for one process group (called by torch.distributed); parent: the default group's "
      "UcxcollBackend, whose connections a group of its ranks is then made from.");
  m.def("_records_flight_natively", &ucxcoll::FlightRecording::recordsNatively,
        "Whether this build writes torch's flight recorder entries itself (else torch's hook does).");
  m.def("ucx_version", &ucxVersion, "Version of the UCX library loaded at run time.");
  m.def("_stop_progress_thread", &stopProgressThreadAtExit, py::call_guard<py::gil_scoped_release>(),
        "Python atexit: let pending collectives finish (UCXCOLL_EXIT_GRACE_MS), then stop the progress thread.");
}
