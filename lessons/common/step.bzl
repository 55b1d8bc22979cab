"""lesson_step: one step of a lesson, from the files in the folder of the same name.

    lesson_step(name = "03_rank_and_world_size", nproc = 2, deps = ["//dist"])

makes
  :03_rank_and_world_size_main   the program (every .cc in the folder),
  :03_rank_and_world_size        `bazel run` it: nproc processes through the launcher,
  :03_rank_and_world_size_test   runs it the same way and asserts the step's claims,
                                 written in the folder's check.sh against its output.
test_nproc runs the test on another number of processes than `bazel run` uses; a step
that is not started by one launcher gives the script that starts it as run_script (it
gets the program's path as its first argument); its test runs that script and check.sh.
A step whose test is not one run and its check (several runs, a killed rank) gives its
own script as test_script; it is run with the program's path as its first argument.
run_data: files both the run and the test need (a helper script); test_tags: the test's
tags (e.g. "no-sandbox" for a step that makes network namespaces).
"""

def lesson_step(name, nproc = 2, deps = [], data = [], test_data = [], test_script = None, test_args = [], test_nproc = None, run_script = None, test_size = "medium", run_data = [], test_tags = []):
    pkg = native.package_name()
    program = pkg + "/" + name + "_main"
    native.cc_binary(
        name = name + "_main",
        srcs = native.glob([name + "/*.cc", name + "/*.h"]),
        deps = deps,
        data = data,
    )
    # The script `bazel run` runs, with its arguments written into it (a line `set -- ...`
    # after the first) rather than given as the target's args: bazel-bin/<pkg>/<name>, the
    # path a build prints, then runs the step as `bazel run` does. A copy beside the target
    # either way: a run_script lives in the folder `name`, which in the runfiles would
    # collide with the executable `name`.
    baked = [program] if run_script else [str(nproc), program]
    native.genrule(
        name = name + "_run_script",
        srcs = [run_script] if run_script else ["//lessons/common:run_ranks.sh"],
        outs = [name + "_run.sh"],
        cmd = "{ head -n 1 $<; echo 'set -- %s \"$$@\"  # as bazel run gives them'; tail -n +2 $<; } > $@" % " ".join(baked),
    )
    native.sh_binary(
        name = name,
        srcs = [name + "_run.sh"],
        data = [":" + name + "_main", "//dist:launch"] + run_data,
    )
    common = [":" + name + "_main", "//dist:launch", "//lessons/common:checks.sh"] + test_data + run_data
    if test_script:
        native.sh_test(
            name = name + "_test",
            srcs = [test_script],
            args = [program] + test_args,
            data = common,
            size = test_size,
            tags = test_tags,
        )
    else:
        native.sh_test(
            name = name + "_test",
            srcs = ["//lessons/common:step_test.sh"],
            args = [pkg + "/" + run_script if run_script else str(test_nproc or nproc), program,
                    pkg + "/" + name + "/check.sh"] + test_args,
            data = common + [name + "/check.sh"] + ([run_script] if run_script else []),
            size = test_size,
            tags = test_tags,
        )

def quick_check(name = "quick_check", deps = [], test_srcs = []):
    """The lesson's exercise: quick_check/exercise.cc (with a TODO) and solution.cc share
    quick_check/exercise.h and quick_check/exercise_test.cc; quick_check/unsolved.sha256
    is the sha256 of exercise.cc as shipped (tools/lint.sh checks it).

      bazel test //lessons/<lesson>:quick_check_exercise   fails until the exercise is done
      :quick_check_solution                                 the same test on the solution
      :quick_check_exercise_fails                           the test fails on the exercise as
                                                            shipped; once changed, says solved or not
    """
    for which in ["exercise", "solution"]:
        native.cc_library(
            name = name + "_" + which + "_lib",
            srcs = [name + "/" + which + ".cc"],
            hdrs = [name + "/exercise.h"],
            deps = deps,
        )
        native.cc_test(
            name = name + "_" + which,
            srcs = [name + "/exercise_test.cc"] + test_srcs,
            deps = [":" + name + "_" + which + "_lib", "//tests:catch2_main", "@catch2"] + deps,
            tags = ["manual"] if which == "exercise" else [],
        )
    native.sh_test(
        name = name + "_exercise_fails",
        srcs = ["//lessons/common:expect_failure.sh"],
        args = [native.package_name() + "/" + name + "_exercise", native.package_name() + "/" + name + "/exercise.cc",
                native.package_name() + "/" + name + "/unsolved.sha256"],
        data = [":" + name + "_exercise", name + "/exercise.cc", name + "/unsolved.sha256"],
    )

def lesson_readmes():
    """The lesson's READMEs (its own and each step's), for //lessons:course_test."""
    native.filegroup(
        name = "readmes",
        srcs = native.glob([
            "README.md",
            "*/README.md",
        ]),
        visibility = ["//lessons:__pkg__"],
    )
