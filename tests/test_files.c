// Outputs write only regular files (core/files.h): a FIFO, a device, a directory or a symbolic link where an
// output goes is refused by both doors, AtomicFile (rename over the target) and fopen_output (in place), and
// stays what it was; a link planted under the temporary name is not followed; files_same sees through links.
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "test.h"
#include "testfs.h"
#include "core/files.h"

static unsigned mode_of_(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 ? (unsigned)(st.st_mode & S_IFMT) : 0;
}

// every way of writing path fails with a message holding `says`, and path keeps its type
static void refused_(const char *path, const char *says, const char *what) {
    unsigned before = mode_of_(path);
    Err e = {{0}};
    int rc = write_file_atomic(path, "x\n", 2, &e);
    CHECK(rc == -1, "%s: write_file_atomic refuses it", what);
    CHECK_CONTAINS(e.msg, says, "%s: write_file_atomic says why", what);
    CHECK(mode_of_(path) == before, "%s: still what it was after write_file_atomic", what);
    for (int append = 0; append < 2; append++) {
        memset(&e, 0, sizeof e);
        FILE *f = fopen_output(path, append, &e);
        CHECK(f == NULL, "%s: fopen_output (append %d) refuses it", what, append);
        if (f) fclose(f);
        CHECK_CONTAINS(e.msg, says, "%s: fopen_output (append %d) says why", what, append);
        CHECK(mode_of_(path) == before, "%s: still what it was after fopen_output (append %d)", what, append);
    }
}

int main(void) {
    if (testfs_init("seqtrain_files") != 0) return 1;
    char p[256], victim[256], link[256], tmp[320];

    path_(p, sizeof p, "fifo");
    CHECK(mkfifo(p, 0644) == 0, "a FIFO made");
    refused_(p, "is a FIFO (named pipe), not a regular file", "a FIFO");

    path_(p, sizeof p, "dir");
    CHECK(mkdir(p, 0755) == 0, "a directory made");
    refused_(p, "is a directory, not a regular file", "a directory");

    // a character device where mknod is allowed (root), /dev/null's numbers: never replaced, never written
    path_(p, sizeof p, "null");
    if (mknod(p, S_IFCHR | 0666, makedev(1, 3)) == 0) refused_(p, "is a character device", "a character device");
    else printf("ok - a character device (skipped: mknod: %s)\n", strerror(errno));

    // a symbolic link planted where a log goes: refused, and the file it points to keeps its bytes
    path_(victim, sizeof victim, "victim.txt");
    file_write_(victim, "precious\n", 9);
    path_(link, sizeof link, "log.jsonl");
    CHECK(symlink(victim, link) == 0, "a symbolic link made");
    refused_(link, "is a symbolic link", "a symbolic link");
    size_t n;
    uint8_t *got = file_read_(victim, &n);
    CHECK(got && n == 9 && !memcmp(got, "precious\n", 9), "the link's target keeps its bytes");
    free(got);
    CHECK(files_same(link, victim) == 1, "files_same follows a link to its target");

    // a link planted under AtomicFile's temporary name is replaced, not followed
    path_(p, sizeof p, "out.json");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    CHECK(symlink(victim, tmp) == 0, "a link as the temporary name made");
    Err e = {{0}};
    CHECK(write_file_atomic(p, "{}\n", 3, &e) == 0, "write_file_atomic with a link as its temporary name: %s", e.msg);
    got = file_read_(victim, &n);
    CHECK(got && n == 9 && !memcmp(got, "precious\n", 9), "the temporary name's link target keeps its bytes");
    free(got);
    got = file_read_(p, &n);
    CHECK(got && n == 3 && !memcmp(got, "{}\n", 3), "the output holds what was written");
    free(got);
    CHECK(mode_of_(tmp) == 0, "no temporary file left");
    CHECK(files_same(p, victim) == 0, "files_same: two files differ");
    CHECK(files_same(p, "/nonexistent/x") == 0, "files_same: a missing file is no file");

    // regular files are written as before: in place (truncated or appended) and atomically
    FILE *f = fopen_output(p, 1, &e);
    CHECK(f != NULL, "fopen_output appends to a regular file: %s", e.msg);
    if (f) {
        fputs("more\n", f);
        CHECK(fclose_output(f, p, &e) == 0, "fclose_output of a good write");
    }
    got = file_read_(p, &n);
    CHECK(got && n == 8 && !memcmp(got, "{}\nmore\n", 8), "the append went to the end");
    free(got);
    f = fopen_output(p, 0, &e);
    CHECK(f != NULL, "fopen_output truncates a regular file");
    if (f) fclose(f);
    got = file_read_(p, &n);
    CHECK(got && n == 0, "truncated to nothing");
    free(got);

    // a write that cannot reach the disk is an error naming the file (/dev/full: every write fails ENOSPC)
    int fd = open("/dev/full", O_WRONLY);
    f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) {
        fputs("x", f);
        memset(&e, 0, sizeof e);
        CHECK(fclose_output(f, "/dev/full", &e) == -1, "fclose_output of a failed write fails");
        CHECK_CONTAINS(e.msg, "cannot write /dev/full: No space left on device", "... naming the file and why");
    }

    // a path longer than FILE_PATH_MAX: refused up front, the message cut in the path, not in the reason
    char *lp = malloc(FILE_PATH_MAX + 100);
    memset(lp, 'a', FILE_PATH_MAX + 99);
    lp[FILE_PATH_MAX + 99] = '\0';
    memset(&e, 0, sizeof e);
    CHECK(output_check(lp, &e) == -1, "a path of %d bytes is refused", FILE_PATH_MAX + 99);
    CHECK_CONTAINS(e.msg, "choose a shorter one", "... with the reason whole");
    free(lp);
    return test_summary();
}
