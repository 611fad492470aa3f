#pragma once
// Validation of user input, done on the calling thread before anything is
// sent. Each failure raises the Python exception a user would expect
// (ValueError, TypeError, NotImplementedError) with a message that says what
// was expected, what was given, and what to allocate instead.

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>
#include <vector>

#include "collectives/datatype.hpp"

namespace ucxcoll {

// The element type for reductions; nullopt for dtypes we cannot reduce.
std::optional<DataType> toDataType(at::ScalarType type);

// Exactly one CPU tensor.
void checkSingleTensor(const char* op, const std::vector<at::Tensor>& tensors, const char* role);
void checkCpu(const char* op, const at::Tensor& tensor, const char* role);

// all_gather (list form): one output per rank, each shaped and typed like
// the input.
void checkAllgatherOutputs(const char* op, const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                           int worldSize);

// all_gather (list form) where ranks contribute different shapes: one
// output per rank of the input's dtype, this rank's shaped like its input;
// the others may have any shape (the peer's input must match it).
// outputsDifferInShape: whether the call is such an uneven one (a list of
// the right length whose own entry matches but another does not).
bool outputsDifferInShape(const std::vector<at::Tensor>& outputs, const at::Tensor& input, int worldSize, int rank);
void checkUnevenAllgatherOutputs(const char* op, const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                                 int worldSize, int rank);

// all_gather_into_tensor: output holds worldSize inputs (concatenated or
// stacked), same dtype.
void checkAllgatherIntoTensor(const char* op, const at::Tensor& output, const at::Tensor& input, int worldSize);

void checkRoot(const char* op, int64_t root, int worldSize);

// A list that must hold one tensor per rank: `what` names it ("the input
// list"), `allocate` says what to pass instead.
void checkOnePerRank(const char* op, std::size_t count, int worldSize, const std::string& what,
                     const std::string& allocate);
// `tensor` (named by `what`, e.g. "input tensor 2") is a CPU tensor of the
// reference's dtype (TypeError) and shape (ValueError).
void checkShapedLike(const char* op, const at::Tensor& tensor, const std::string& what, const at::Tensor& reference,
                     const std::string& referenceName, const std::string& allocate);
// Same dtype as the reference (TypeError), any shape.
void checkSameDtype(const char* op, const at::Tensor& tensor, const std::string& what, const at::Tensor& reference,
                    const std::string& referenceName);

// A point-to-point peer: a rank of the group ("destination" or "source").
void checkPeer(const char* op, int64_t peer, int worldSize, const char* role);
// A point-to-point tag: non-negative (and within what a tag can carry).
void checkTag(const char* op, int64_t tag);

// The element type of a tensor to reduce, or TypeError.
DataType reducibleType(const char* op, const at::Tensor& tensor);
// torch's reduce op as a Reduction: NotImplementedError for the ones not
// supported yet, TypeError for one not defined on `type` (e.g. MAX of
// complex numbers, BAND of floats).
Reduction toReduction(const char* op, const c10d::ReduceOp& reduceOp, DataType type);
// PREMUL_SUM's factor (a number or a one-element tensor); 1 for other ops.
double premulFactor(const char* op, const c10d::ReduceOp& reduceOp);
const char* reduceOpName(const c10d::ReduceOp& op);

std::string shapeText(const at::Tensor& tensor);

}  // namespace ucxcoll
