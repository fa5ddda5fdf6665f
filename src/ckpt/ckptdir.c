#include "ckpt/ckptdir.h"
#include "core/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------------
// one writer per run directory

int rundir_lock(const char *run_dir, Err *e) {
    char path[CKPT_PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/lock", run_dir);
    if (output_check(path, e) != 0) return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) return err_set(e, "%s: cannot open the run's lock file: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char holder[256] = "";
        ssize_t n = err == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
        close(fd);
        if (n < 0) return err_set(e, "%s: cannot lock: %s", path, strerror(err));
        holder[n] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        long pid = 0;
        char host[200] = "?";
        sscanf(holder, "%ld %199s", &pid, host);
        return err_set(e, "%s is in use by another process (pid %ld on host %s, which holds %s): one process writes a "
                       "run at a time; wait for it to end, or start this one elsewhere with --set run.name=NEW",
                       run_dir, pid, host, path);
    }
    // this process's name in the file; the descriptor stays open (close-on-exec) for the process's life
    char host[200] = "?", line[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    int len = snprintf(line, sizeof line, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        int err = errno;
        close(fd);
        return err_set(e, "%s: cannot write the run's lock file: %s", path, strerror(err));
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------------
// directory helpers

int remove_tree(const char *path, Err *e) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        return err_set(e, "%s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0) return err_set(e, "%s: cannot remove: %s", path, strerror(errno));
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return err_set(e, "%s: cannot open directory: %s", path, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        char sub[PATH_MAX];
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", path, de->d_name) >= sizeof sub) {
            rc = err_set(e, "%s/%s: path too long", path, de->d_name);
            break;
        }
        if (remove_tree(sub, e)) { rc = -1; break; }
    }
    closedir(d);
    if (rc) return rc;
    if (rmdir(path) != 0) return err_set(e, "%s: cannot remove directory: %s", path, strerror(errno));
    return 0;
}

// mkdir -p
static int mkdir_p_(const char *dir, Err *e) {
    char buf[CKPT_PATH_MAX];
    if (strlen(dir) >= sizeof buf) return err_set(e, "%s: path too long", dir);
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return err_set(e, "%s: cannot create directory: %s", buf, strerror(errno));
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return err_set(e, "%s: not a directory", dir);
    return 0;
}

long ckptdir_parse_name(const char *name) {
    if (strncmp(name, "ckpt-", 5) != 0) return -1;
    const char *p = name + 5;
    if (!*p) return -1;
    long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return -1;  // "ckpt-12.tmp.99", "ckpt-12.old.99": not complete
        if (v > (LONG_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

// ---------------------------------------------------------------------------------------------------
// checkpoint directories

static int remove_leftovers_(const char *run_dir, int restore, FILE *report, Err *e);

int ckptdir_begin(CkptDir *c, const char *run_dir, long step, Err *e) {
    memset(c, 0, sizeof *c);
    if (step < 0) return err_set(e, "checkpoint step %ld is negative", step);
    if (strlen(run_dir) >= sizeof c->run_dir) return err_set(e, "%s: run directory path too long", run_dir);
    if (mkdir_p_(run_dir, e)) return -1;
    snprintf(c->run_dir, sizeof c->run_dir, "%s", run_dir);
    snprintf(c->name, sizeof c->name, "ckpt-%08ld", step);
    snprintf(c->final, sizeof c->final, "%s/%s", run_dir, c->name);
    snprintf(c->tmp, sizeof c->tmp, "%s.tmp.%ld", c->final, (long)getpid());
    c->step = step;
    // a leftover from an earlier process with our pid (pids get reused) would mix old files in; those
    // of dead processes go too (a run started over in a directory a kill left without a checkpoint; on
    // --resume seqtrain already removed them, restoring a replaced step, before reading the directory)
    if (remove_tree(c->tmp, e) || remove_leftovers_(run_dir, 0, stderr, e) < 0) return -1;
    if (mkdir(c->tmp, 0755) != 0) return err_set(e, "%s: cannot create checkpoint directory: %s", c->tmp, strerror(errno));
    c->active = 1;
    return 0;
}

int ckptdir_path(const CkptDir *c, const char *name, char *out, size_t n, Err *e) {
    if (!c->active) return err_set(e, "checkpoint directory not begun (call ckptdir_begin first)");
    if ((size_t)snprintf(out, n, "%s/%s", c->tmp, name) >= n) return err_set(e, "%s/%s: path too long", c->tmp, name);
    return 0;
}

// fsync every regular file directly inside dir, then dir itself
static int fsync_tree_(const char *dir, Err *e) {
    DIR *d = opendir(dir);
    if (!d) return err_set(e, "%s: cannot open directory: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' && (de->d_name[1] == '\0' || (de->d_name[1] == '.' && de->d_name[2] == '\0'))) continue;
        char sub[PATH_MAX];
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name) >= sizeof sub) {
            rc = err_set(e, "%s/%s: path too long", dir, de->d_name);
            break;
        }
        struct stat st;
        if (lstat(sub, &st) != 0) { rc = err_set(e, "%s: %s", sub, strerror(errno)); break; }
        if (S_ISDIR(st.st_mode)) {
            if (fsync_tree_(sub, e)) { rc = -1; break; }
            continue;
        }
        if (!S_ISREG(st.st_mode)) continue;
        int fd = open(sub, O_RDONLY | O_CLOEXEC);
        if (fd < 0) { rc = err_set(e, "%s: cannot open to fsync: %s", sub, strerror(errno)); break; }
        int r = fsync(fd);
        int err = errno;
        close(fd);
        if (r != 0) { rc = err_set(e, "%s: fsync failed: %s", sub, strerror(err)); break; }
    }
    closedir(d);
    if (rc) return rc;
    return fsync_dir(dir, e);
}

int ckptdir_commit(CkptDir *c, Err *e) {
    if (!c->active) return err_set(e, "checkpoint directory not begun (call ckptdir_begin first)");
    if (fsync_tree_(c->tmp, e)) return -1;

    // rename() cannot replace a non-empty directory, so an existing checkpoint of this step goes aside
    // first; between the two renames the newest checkpoint is briefly missing, never half-written
    char old[CKPT_PATH_MAX + 160];
    snprintf(old, sizeof old, "%s.old.%ld", c->final, (long)getpid());
    int have_old = 0;
    struct stat st;
    if (lstat(c->final, &st) == 0) {
        if (remove_tree(old, e)) return -1;
        if (rename(c->final, old) != 0)
            return err_set(e, "%s: cannot move the existing checkpoint aside: %s", c->final, strerror(errno));
        have_old = 1;
    }
    if (rename(c->tmp, c->final) != 0) {
        int err = errno;
        if (have_old) rename(old, c->final);  // put the previous one back; best effort
        return err_set(e, "%s: cannot rename %s into place: %s", c->final, c->tmp, strerror(err));
    }
    c->active = 0;
    if (fsync_dir(c->run_dir, e)) return -1;
    if (have_old && remove_tree(old, e)) return err_prefix(e, "%s: committed, but removing the replaced copy failed: ", c->final);

    char latest[CKPT_PATH_MAX + 16], line[80];
    snprintf(latest, sizeof latest, "%s/latest", c->run_dir);
    int len = snprintf(line, sizeof line, "%s\n", c->name);
    return write_file_atomic(latest, line, (size_t)len, e);
}

void ckptdir_abort(CkptDir *c) {
    if (!c->active) return;
    Err ignored;
    remove_tree(c->tmp, &ignored);
    c->active = 0;
}

// the first line of run_dir/latest into buf ("" when there is none)
static void latest_line_(const char *run_dir, char buf[80]) {
    char path[CKPT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/latest", run_dir);
    buf[0] = '\0';
    int not_regular;
    FILE *f = fopen_regular(path, &not_regular, NULL);  // never blocks on a FIFO named latest
    if (!f) return;
    size_t got = fread(buf, 1, 79, f);
    fclose(f);
    buf[got] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
}

// the checkpoint `latest` names, when that file is well formed and the directory exists; else -1
static long latest_file_step_(const char *run_dir, char *name, size_t n) {
    char buf[80];
    latest_line_(run_dir, buf);
    long step = ckptdir_parse_name(buf);
    if (step < 0) return -1;
    char dir[CKPT_PATH_MAX + 96];
    snprintf(dir, sizeof dir, "%s/%s", run_dir, buf);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return -1;
    snprintf(name, n, "%s", buf);
    return step;
}

typedef struct CkptEntry_ {
    long step;
    char name[64];
} CkptEntry_;

static int entry_cmp_desc_(const void *a, const void *b) {
    long x = ((const CkptEntry_ *)a)->step, y = ((const CkptEntry_ *)b)->step;
    return (x < y) - (x > y);
}

// every complete checkpoint in run_dir, highest step first; *n = count (0 when run_dir is missing)
static int list_ckpts_(const char *run_dir, CkptEntry_ **out, int *n, Err *e) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(run_dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return err_set(e, "%s: cannot open run directory: %s", run_dir, strerror(errno));
    }
    int cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long step = ckptdir_parse_name(de->d_name);
        size_t len = strlen(de->d_name);
        if (step < 0 || len >= sizeof((CkptEntry_ *)0)->name) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", run_dir, de->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            *out = xrealloc(*out, (size_t)cap * sizeof **out);
        }
        (*out)[*n].step = step;
        memcpy((*out)[*n].name, de->d_name, len + 1);
        (*n)++;
    }
    closedir(d);
    if (*n > 1) qsort(*out, (size_t)*n, sizeof **out, entry_cmp_desc_);
    return 0;
}

int ckptdir_latest(const char *run_dir, char *out, size_t n, Err *e) {
    if (n) out[0] = '\0';
    char name[64];
    if (latest_file_step_(run_dir, name, sizeof name) < 0) {
        // no usable `latest` (never written, or it names a pruned/removed checkpoint): scan instead
        CkptEntry_ *list;
        int cnt;
        if (list_ckpts_(run_dir, &list, &cnt, e)) return -1;
        if (cnt == 0) { free(list); return 0; }
        snprintf(name, sizeof name, "%s", list[0].name);
        free(list);
    }
    if ((size_t)snprintf(out, n, "%s/%s", run_dir, name) >= n) {
        if (n) out[0] = '\0';
        return err_set(e, "%s/%s: path too long for the caller's buffer (%zu bytes)", run_dir, name, n);
    }
    return 1;
}

int ckptdir_prune(const char *run_dir, int keep_last, Err *e) {
    if (keep_last < 1) return err_set(e, "keep_last is %d; it must be at least 1 (the newest checkpoint is never pruned)", keep_last);
    CkptEntry_ *list;
    int cnt;
    if (list_ckpts_(run_dir, &list, &cnt, e)) return -1;
    char latest[64] = "";
    latest_file_step_(run_dir, latest, sizeof latest);
    int removed = 0, rc = 0;
    for (int i = keep_last; i < cnt; i++) {
        if (strcmp(list[i].name, latest) == 0) continue;  // a resume would look for it
        char path[CKPT_PATH_MAX + 96];
        snprintf(path, sizeof path, "%s/%s", run_dir, list[i].name);
        // rename first so a crash mid-removal leaves an ignored *.old.* name, not a partial ckpt-N
        char doomed[CKPT_PATH_MAX + 160];
        snprintf(doomed, sizeof doomed, "%s.old.%ld", path, (long)getpid());
        if (rename(path, doomed) != 0) { rc = err_set(e, "%s: cannot remove: %s", path, strerror(errno)); break; }
        if (remove_tree(doomed, e)) { rc = -1; break; }
        removed++;
    }
    free(list);
    if (rc) return rc;
    if (removed && fsync_dir(run_dir, e)) return -1;
    return removed;
}

// ---------------------------------------------------------------------------------------------------
// leftovers of processes that died mid-checkpoint

// "ckpt-<digits>.tmp.<pid>" / "ckpt-<digits>.old.<pid>": *kind = 't' or 'o', base = "ckpt-<digits>";
// returns the pid, or -1 when name has neither form
static long leftover_pid_(const char *name, char *kind, char *base, size_t n) {
    const char *dot = strchr(name, '.');
    if (!dot || (strncmp(dot, ".tmp.", 5) != 0 && strncmp(dot, ".old.", 5) != 0)) return -1;
    if ((size_t)(dot - name) >= n) return -1;
    snprintf(base, n, "%.*s", (int)(dot - name), name);
    if (ckptdir_parse_name(base) < 0) return -1;
    const char *p = dot + 5;
    if (!*p) return -1;
    long pid = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        if (pid > (INT_MAX - 9) / 10) return -1;  // larger than any pid_t: not one of ours
        pid = pid * 10 + (*p - '0');
    }
    *kind = dot[1];
    return pid;
}

// 1 when no process pid exists (kill says ESRCH); a live one, even another user's (EPERM), is 0
static int pid_dead_(long pid) {
    if (pid <= 0) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static int remove_leftovers_(const char *run_dir, int restore, FILE *report, Err *e) {
    DIR *d = opendir(run_dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return err_set(e, "%s: cannot open run directory: %s", run_dir, strerror(errno));
    }
    // collect first: removing entries while readdir walks the directory may skip or repeat names
    char (*names)[256] = NULL;
    int cnt = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char kind, base[64];
        long pid = leftover_pid_(de->d_name, &kind, base, sizeof base);
        if (pid < 0 || pid == (long)getpid() || !pid_dead_(pid) || strlen(de->d_name) >= sizeof *names) continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 8;
            names = xrealloc(names, (size_t)cap * sizeof *names);
        }
        snprintf(names[cnt++], sizeof *names, "%s", de->d_name);
    }
    closedir(d);
    char latest[80];
    latest_line_(run_dir, latest);
    int done = 0, rc = 0;
    for (int i = 0; i < cnt && rc == 0; i++) {
        char kind, base[64];
        long pid = leftover_pid_(names[i], &kind, base, sizeof base);
        char path[CKPT_PATH_MAX + 256], final[CKPT_PATH_MAX + 96];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", run_dir, names[i]) >= sizeof path) {
            rc = err_set(e, "%s/%s: path too long", run_dir, names[i]);
            break;
        }
        snprintf(final, sizeof final, "%s/%s", run_dir, base);
        struct stat st;
        // a process killed between ckptdir_commit's two renames left its step only as *.old.<pid>, which
        // was complete (it had the final name) and is the one `latest` names: put it back rather than lose
        // that step. A *.old.* that `latest` does not name may be a pruned one cut short: never restored
        if (restore && kind == 'o' && strcmp(latest, base) == 0 && lstat(final, &st) != 0 && errno == ENOENT &&
            lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (rename(path, final) != 0) {
                rc = err_set(e, "%s: cannot restore it as %s: %s", path, final, strerror(errno));
                break;
            }
            if (report)
                fprintf(report, "seqtrain: note: restored %s as %s (process %ld died while replacing it)\n",
                        path, base, pid);
            done++;
            continue;
        }
        if (remove_tree(path, e)) { rc = err_prefix(e, "removing a dead process's leftover checkpoint: "); break; }
        if (report)
            fprintf(report, "seqtrain: note: removed %s (%s checkpoint left by process %ld, which is no "
                    "longer running)\n", path, kind == 't' ? "an unfinished" : "a replaced", pid);
        done++;
    }
    free(names);
    if (rc) return rc;
    if (done && fsync_dir(run_dir, e)) return -1;
    return done;
}

int ckptdir_remove_leftovers(const char *run_dir, FILE *report, Err *e) {
    return remove_leftovers_(run_dir, 1, report, e);
}
