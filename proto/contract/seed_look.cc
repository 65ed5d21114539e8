// The one-line description of a seed policy look (contract.h DescribeSeedLook), shared by the
// coordinator's log and report and the client's watch.
#include <cmath>
#include <cstdio>
#include <string>

#include "proto/contract/contract.h"

namespace rdattn::contract {

std::string DescribeSeedLook(const pb::SeedLook& look, bool with_comparisons) {
  std::string out =
      "look " + std::to_string(look.look()) + " at n = " + std::to_string(look.n_seeds()) + ": ";
  if (look.decision() == "continue") {
    out += "continue, adding seed" + std::string(look.added_seeds_size() > 1 ? "s " : " ");
    for (int i = 0; i < look.added_seeds_size(); ++i) {
      out += (i ? ", " : "") + std::to_string(look.added_seeds(i));
    }
  } else {
    out += (look.decision().empty() ? std::string("?") : look.decision()) +
           (look.reason().empty() ? "" : " (" + look.reason() + ")");
  }
  if (!with_comparisons) return out;
  std::string details;
  for (const pb::LookComparison& c : look.comparisons()) {
    char t[32];
    if (std::isnan(c.t_statistic())) {
      std::snprintf(t, sizeof t, "n/a");
    } else {
      std::snprintf(t, sizeof t, "%.3f", c.t_statistic());
    }
    details += (details.empty() ? "" : "; ") + c.scale() + " " + c.arm() + ": t = " + t + " (" +
               c.outcome() + ")";
  }
  return details.empty() ? out : out + " [" + details + "]";
}

}  // namespace rdattn::contract
