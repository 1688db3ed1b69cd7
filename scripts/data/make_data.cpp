// Regenerates the shipped data files (see data/README.md). Built and run by scripts/data/make_data.sh:
//   make_data tasks DATA_DIR              data/<task>/{train,valid,test}.jsonl for every algorithmic task
//   make_data text VERSES_FILE OUT_DIR    data/kjv/{train,valid,test}.jsonl from `bible -f` output
#include <cstdio>
#include <string>

#include "normlab/data/splits.hpp"
#include "normlab/data/task.hpp"
#include "normlab/error.hpp"

int main(int argc, char** argv) {
  using namespace normlab::data;
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "tasks" && argc == 3) {
      for (const std::string& name : algorithmic_task_names()) {
        for (const std::string& path : write_task_splits(make_task(name), std::string(argv[2]) + "/" + name)) {
          std::printf("wrote %s\n", path.c_str());
        }
      }
      return 0;
    }
    if (mode == "text" && argc == 4) {
      for (const std::string& path : write_text_splits(argv[2], argv[3])) std::printf("wrote %s\n", path.c_str());
      return 0;
    }
    std::fprintf(stderr, "usage: make_data tasks DATA_DIR | make_data text VERSES_FILE OUT_DIR\n");
    return 2;
  } catch (const normlab::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
