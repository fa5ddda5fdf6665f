/*
 * Leftovers of killed processes in a run directory (issue 24 item 7): ckpt-<step>.tmp.<pid> and
 * ckpt-<step>.old.<pid> directories of dead processes are removed (a replaced step whose ckpt-<step> is
 * missing and that `latest` names is renamed back), with one line each saying what was removed; those of
 * live processes (a sleeping child, our parent, ourselves) and names of any other form stay. ckptdir_begin
 * removes dead leftovers too, without restoring. Everything lives in a mkdtemp directory removed at the end.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckptdir.h"
#include "test.h"
#include "testfs.h"

static int exists_(const char *run, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", run, name);
    struct stat st;
    return lstat(p, &st) == 0;
}

// run/name/ as a directory holding one file, like a (partial) checkpoint
static void mkckpt_(const char *run, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", run, name);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/model.safetensors", run, name);
    file_write_(p, "x", 1);
}

// a pid that was ours a moment ago and is now gone
static long dead_pid_(void) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    int st;
    waitpid(pid, &st, 0);
    return (long)pid;
}

int main(void) {
    if (testfs_init("seq_ckptdir_leftovers") != 0) return 1;
    char run[256], name[400], report[4096], want[512];
    path_(run, sizeof run, "run");
    mkdir(run, 0755);
    Err e = {{0}};

    long dead = dead_pid_();
    pid_t live = fork();
    if (live == 0) { pause(); _exit(0); }
    long self = (long)getpid(), parent = (long)getppid();

    char dead_tmp[64], dead_old[64], dead_old_lost[64], dead_pruned[64], live_tmp[64], self_tmp[64], parent_tmp[64];
    snprintf(dead_tmp, sizeof dead_tmp, "ckpt-00000004.tmp.%ld", dead);
    snprintf(dead_old, sizeof dead_old, "ckpt-00000002.old.%ld", dead);
    snprintf(dead_old_lost, sizeof dead_old_lost, "ckpt-00000006.old.%ld", dead);
    snprintf(dead_pruned, sizeof dead_pruned, "ckpt-00000001.old.%ld", dead);
    snprintf(live_tmp, sizeof live_tmp, "ckpt-00000004.tmp.%ld", (long)live);
    snprintf(self_tmp, sizeof self_tmp, "ckpt-00000008.tmp.%ld", self);
    snprintf(parent_tmp, sizeof parent_tmp, "ckpt-00000008.tmp.%ld", parent);
    mkckpt_(run, "ckpt-00000002");
    mkckpt_(run, dead_tmp);
    mkckpt_(run, dead_old);
    mkckpt_(run, dead_old_lost);  // killed between commit's renames: step 6 exists only under this name
    mkckpt_(run, dead_pruned);    // killed while pruning step 1: maybe partly removed, and `latest` is not it
    snprintf(name, sizeof name, "%s/latest", run);
    file_write_(name, "ckpt-00000006\n", 14);
    mkckpt_(run, live_tmp);
    mkckpt_(run, self_tmp);
    mkckpt_(run, parent_tmp);
    snprintf(name, sizeof name, "notes.tmp.%ld", dead);  // not a checkpoint name: never ours to remove
    mkckpt_(run, name);
    snprintf(name, sizeof name, "ckpt-4x.tmp.%ld", dead);
    mkckpt_(run, name);
    mkckpt_(run, "ckpt-00000004.tmp.99999999999");  // no pid is that large

    FILE *f = tmpfile();
    int n = ckptdir_remove_leftovers(run, f, &e);
    rewind(f);
    size_t got = fread(report, 1, sizeof report - 1, f);
    report[got] = '\0';
    fclose(f);
    CHECK(n == 4, "four leftovers of the dead process handled (got %d%s%.200s)", n, n < 0 ? ": " : "",
          n < 0 ? e.msg : "");
    CHECK(!exists_(run, dead_tmp), "a dead process's ckpt-*.tmp.<pid> is removed");
    CHECK(!exists_(run, dead_old), "a dead process's ckpt-*.old.<pid> is removed when its step exists");
    CHECK(exists_(run, "ckpt-00000002/model.safetensors"), "the complete checkpoint of that step stays");
    CHECK(!exists_(run, dead_old_lost) && exists_(run, "ckpt-00000006/model.safetensors"),
          "a dead process's ckpt-*.old.<pid> whose step is missing and that latest names is renamed back");
    CHECK(!exists_(run, dead_pruned) && !exists_(run, "ckpt-00000001"),
          "one that latest does not name (a prune cut short) is removed, not renamed back");
    CHECK(exists_(run, live_tmp), "a live process's temp checkpoint stays");
    CHECK(exists_(run, self_tmp), "our own temp checkpoint stays");
    CHECK(exists_(run, parent_tmp), "our parent's (live) temp checkpoint stays");
    snprintf(name, sizeof name, "notes.tmp.%ld", dead);
    CHECK(exists_(run, name), "a non-checkpoint *.tmp.<pid> name stays");
    snprintf(name, sizeof name, "ckpt-4x.tmp.%ld", dead);
    CHECK(exists_(run, name) && exists_(run, "ckpt-00000004.tmp.99999999999"), "malformed names stay");

    snprintf(want, sizeof want, "removed %s/%s (an unfinished checkpoint left by process %ld, which is no longer "
             "running)", run, dead_tmp, dead);
    CHECK_CONTAINS(report, want, "the report names the removed temp checkpoint and the dead pid");
    snprintf(want, sizeof want, "removed %s/%s (a replaced checkpoint", run, dead_old);
    CHECK_CONTAINS(report, want, "the report names the removed replaced copy");
    snprintf(want, sizeof want, "restored %s/%s as ckpt-00000006", run, dead_old_lost);
    CHECK_CONTAINS(report, want, "the report names the restored step");
    CHECK(strstr(report, live_tmp) == NULL, "a live process's directory is not reported");
    CHECK(ckptdir_remove_leftovers(run, NULL, &e) == 0, "a second pass finds nothing");

    // ckptdir_begin (every checkpoint write, so also a run started over) removes them, restoring nothing
    mkckpt_(run, dead_tmp);
    snprintf(name, sizeof name, "ckpt-00000010.old.%ld", dead);
    mkckpt_(run, name);
    CkptDir c;
    CHECK(ckptdir_begin(&c, run, 12, &e) == 0, "begin: %.300s", e.msg);
    CHECK(!exists_(run, dead_tmp) && !exists_(run, name) && !exists_(run, "ckpt-00000010"),
          "begin removes a dead process's leftovers without restoring");
    CHECK(exists_(run, live_tmp), "begin keeps a live process's temp checkpoint");
    ckptdir_abort(&c);

    char missing[300];
    path_(missing, sizeof missing, "no-such-run");
    CHECK(ckptdir_remove_leftovers(missing, NULL, &e) == 0, "a missing run directory has no leftovers");

    kill(live, SIGKILL);
    int st;
    waitpid(live, &st, 0);
    CHECK(ckptdir_remove_leftovers(run, NULL, &e) == 1 && !exists_(run, live_tmp),
          "once that process is gone its temp checkpoint is removed too");

    remove_tree(dir_, &e);
    return test_summary();
}
