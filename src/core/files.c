#include "core/files.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int open_regular(const char *path, unsigned *mode) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    if (mode) *mode = (unsigned)st.st_mode;
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return OPEN_NOT_REGULAR;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

FILE *fopen_regular(const char *path, int *not_regular, unsigned *mode) {
    *not_regular = 0;
    int fd = open_regular(path, mode);
    if (fd == OPEN_NOT_REGULAR) *not_regular = 1;
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

const char *file_kind(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a file";
    }
}

int files_same(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// ---------------------------------------------------------------------------------------------------
// outputs

int output_check(const char *path, Err *e) {
    if (strlen(path) >= FILE_PATH_MAX)
        return err_set(e, "%.60s...: the path is %zu bytes long, more than %d; choose a shorter one", path,
                       strlen(path), FILE_PATH_MAX - 1);
    struct stat st;
    if (lstat(path, &st) != 0) return 0;  // missing (or unreachable: the open that follows says why)
    if (S_ISREG(st.st_mode)) return 0;
    if (S_ISLNK(st.st_mode))
        return err_set(e, "%s: is a symbolic link; refusing to write through it (remove it, or name the file it "
                       "points to)", path);
    return err_set(e, "%s: is %s, not a regular file; refusing to write to it (name a file)", path,
                   file_kind((unsigned)st.st_mode));
}

FILE *fopen_output(const char *path, int append, Err *e) {
    if (output_check(path, e) != 0) return NULL;
    // O_NOFOLLOW and O_NONBLOCK: a link or a FIFO that appeared since the check is refused, not waited on
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : 0), 0644);
    if (fd < 0) {
        err_set(e, "%s: cannot open for writing: %s", path, errno == ELOOP ? "it is a symbolic link" : strerror(errno));
        return NULL;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = file_kind((unsigned)st.st_mode);
    else if (!append && ftruncate(fd, 0) != 0) why = strerror(errno);
    int fl = why ? -1 : fcntl(fd, F_GETFL);
    if (!why && (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1)) why = strerror(errno);
    FILE *f = why ? NULL : fdopen(fd, append ? "a" : "w");
    if (!f) {
        if (!why) why = strerror(errno);
        close(fd);
        err_set(e, "%s: cannot open for writing: %s", path, why);
    }
    return f;
}

int fclose_output(FILE *f, const char *path, Err *e) {
    errno = 0;
    int bad = ferror(f) || fflush(f) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    return bad ? err_set(e, "cannot write %s: %s", path, err ? strerror(err) : "write error") : 0;
}

// ---------------------------------------------------------------------------------------------------
// atomic files

// dirname of path into out ("." when path has no slash)
static void parent_dir_(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) { snprintf(out, n, "."); return; }
    if (slash == path) { snprintf(out, n, "/"); return; }
    snprintf(out, n, "%.*s", (int)(slash - path), path);
}

int fsync_dir(const char *dir, Err *e) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return err_set(e, "%s: cannot open directory to fsync: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    // some filesystems cannot fsync directories (EINVAL); the rename itself is still atomic there
    if (rc != 0 && err != EINVAL) return err_set(e, "%s: fsync failed: %s", dir, strerror(err));
    return 0;
}

int atomic_file_open(AtomicFile *af, const char *path, Err *e) {
    memset(af, 0, sizeof *af);
    if (output_check(path, e) != 0) return -1;
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%ld", path, (long)getpid());
    // a leftover of an earlier process with this pid goes first, so O_EXCL creates a new file: never one
    // reached through a link planted under the temporary name
    unlink(af->tmp);
    int fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    af->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!af->f) {
        int err = errno;
        if (fd >= 0) close(fd);
        unlink(af->tmp);
        af->tmp[0] = '\0';
        return err_set(e, "%s: cannot create temporary file %s.tmp.%ld: %s", path, path, (long)getpid(),
                       strerror(err));
    }
    return 0;
}

void atomic_file_abort(AtomicFile *af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    if (af->tmp[0]) unlink(af->tmp);
    af->tmp[0] = '\0';
}

int atomic_file_commit(AtomicFile *af, Err *e) {
    if (!af->f) return err_set(e, "%s: not open for writing", af->path);
    // fwrite errors are sticky in the FILE, so checking here catches a failed write anywhere before
    int bad = ferror(af->f) || fflush(af->f) != 0;
    int err = errno;
    if (!bad && fsync(fileno(af->f)) != 0) { bad = 1; err = errno; }
    if (fclose(af->f) != 0 && !bad) { bad = 1; err = errno; }
    af->f = NULL;
    if (bad) {
        atomic_file_abort(af);
        return err_set(e, "%s: write failed: %s", af->path, strerror(err ? err : EIO));
    }
    // the target may have become a device or a link since the open (a rename would replace it)
    if (output_check(af->path, e) != 0) {
        atomic_file_abort(af);
        return -1;
    }
    if (rename(af->tmp, af->path) != 0) {
        err = errno;
        atomic_file_abort(af);
        return err_set(e, "%s: cannot rename temporary file into place: %s", af->path, strerror(err));
    }
    af->tmp[0] = '\0';
    char dir[FILE_PATH_MAX];
    parent_dir_(af->path, dir, sizeof dir);
    return fsync_dir(dir, e);
}

int write_file_atomic(const char *path, const void *data, size_t len, Err *e) {
    AtomicFile af;
    if (atomic_file_open(&af, path, e)) return -1;
    if (len && fwrite(data, 1, len, af.f) != len) {
        int err = errno;
        atomic_file_abort(&af);
        return err_set(e, "%s: write failed: %s", path, strerror(err ? err : EIO));
    }
    return atomic_file_commit(&af, e);
}
