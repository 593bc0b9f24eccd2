// Private to src/driver: the summary `qbc inspect` shows of an MBLT graph (inspect_graph).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "qbc/ir/graph.h"

namespace qbc::driver {

/// file, graph, producer, architecture, source (files, weights, source dtypes), inputs,
/// outputs, blocks, nodes, ops, parameters (by part and dtype) of `g`, read from `path`.
nlohmann::ordered_json graph_summary_json(const ir::Graph& g, const std::string& path);

/// The summary as the text `qbc inspect` prints.
std::string graph_summary_text(const nlohmann::ordered_json& j);

}  // namespace qbc::driver
