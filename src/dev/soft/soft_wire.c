/*
 * Software device wire: shared-memory segments and who owns them.
 *
 * Every segment is a file in /dev/shm named after its owner process
 * (pid and start time, so that a reused pid is not mistaken for the owner):
 *   rc_tm_soft.<pid>.<start>.d<dev>         device: registration table
 *   rc_tm_soft.<pid>.<start>.d<dev>.c<n>    a connection's inbound ring
 *   rc_tm_soft.<pid>.<start>.d<dev>.s<n>    a TM-SRQ's accept queue
 * The owner unlinks them on close and at exit; a process killed before that
 * leaves them behind, and the next device opened on the host unlinks those
 * whose owner is gone.
 */
#include "soft_dev.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SOFT_SHM_DIR "/dev/shm"

/* Segments this process created and has not destroyed: unlinked at exit.
 * A list through the segments themselves, so that any number is tracked (a
 * process that never closes its contexts may own thousands).  A forked
 * child inherits a copy: only the process that created a segment unlinks
 * it, and the child starts a list of its own with its first segment. */
static pthread_mutex_t soft_owned_lock = PTHREAD_MUTEX_INITIALIZER;
static soft_list_t soft_owned = { &soft_owned, &soft_owned };
static pid_t soft_owned_pid;
static bool soft_atexit_done;

uint64_t soft_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reads state (field 3) and start time (field 22) of /proc/<pid>/stat */
static int soft_proc_stat(pid_t pid, char *state, uint64_t *start_time)
{
    char path[64], buf[1024], *p;
    unsigned long long st;
    ssize_t n;
    int fd, field;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return EIO;
    }
    buf[n] = '\0';

    /* the command name may contain anything; fields resume after the last ')' */
    p = strrchr(buf, ')');
    if ((p == NULL) || (p[1] != ' ')) {
        return EIO;
    }
    p += 2;
    *state = *p;
    for (field = 3; field < 22; ++field) {
        p = strchr(p, ' ');
        if (p == NULL) {
            return EIO;
        }
        ++p;
    }
    if (sscanf(p, "%llu", &st) != 1) {
        return EIO;
    }
    *start_time = st;
    return 0;
}

int soft_proc_start_time(pid_t pid, uint64_t *start_time)
{
    char state;

    return soft_proc_stat(pid, &state, start_time);
}

int soft_proc_self(soft_proc_id_t *id)
{
    id->pid = (uint32_t)getpid();
    id->uid = (uint32_t)getuid();
    return soft_proc_start_time(getpid(), &id->start_time);
}

/* Alive: same pid and start time, and not a zombie (which never answers) */
bool soft_proc_alive(const soft_proc_id_t *id)
{
    uint64_t st;
    char state;

    if (soft_proc_stat((pid_t)id->pid, &state, &st) != 0) {
        return false;
    }
    return (st == id->start_time) && (state != 'Z') && (state != 'X');
}

uint32_t soft_host_id(void)
{
    static uint32_t host_id;
    char buf[64] = {0};
    uint32_t h = 2166136261u;   /* FNV-1a */
    ssize_t n = 0;
    int fd, i;

    if (host_id != 0) {
        return host_id;
    }
    fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
    }
    if (n <= 0) {
        n = snprintf(buf, sizeof(buf), "%ld", gethostid());
    }
    for (i = 0; i < n; ++i) {
        h = (h ^ (uint8_t)buf[i]) * 16777619u;
    }
    host_id = h ? h : 1;
    return host_id;
}

/* kind 0: the device segment; 'c' a ring, 's' an SRQ's accept queue */
void soft_seg_name(char *buf, size_t len, const soft_proc_id_t *owner,
                   uint32_t dev_seq, char kind, uint32_t seq)
{
    if (kind == 0) {
        snprintf(buf, len, SOFT_SHM_PREFIX "%u.%llu.d%u", owner->pid,
                 (unsigned long long)owner->start_time, dev_seq);
    } else {
        snprintf(buf, len, SOFT_SHM_PREFIX "%u.%llu.d%u.%c%u", owner->pid,
                 (unsigned long long)owner->start_time, dev_seq, kind, seq);
    }
}

static void soft_owned_atexit(void)
{
    soft_shm_t *shm;

    pthread_mutex_lock(&soft_owned_lock);
    if (soft_owned_pid == getpid()) {
        while (!soft_list_empty(&soft_owned)) {
            shm = soft_container_of(soft_owned.next, soft_shm_t, owned_link);
            soft_list_del(&shm->owned_link);
            shm_unlink(shm->name);
            shm->name[0] = '\0';   /* a later destroy only unmaps it */
        }
    }
    pthread_mutex_unlock(&soft_owned_lock);
}

static void soft_owned_add(soft_shm_t *shm)
{
    pthread_mutex_lock(&soft_owned_lock);
    if (soft_owned_pid != shm->owner) {
        /* first segment of this process, or of a forked child: the
         * inherited list names the parent's segments */
        soft_list_init(&soft_owned);
        soft_owned_pid = shm->owner;
    }
    if (!soft_atexit_done) {
        atexit(soft_owned_atexit);
        soft_atexit_done = true;
    }
    soft_list_add_tail(&soft_owned, &shm->owned_link);
    pthread_mutex_unlock(&soft_owned_lock);
}

static void soft_owned_remove(soft_shm_t *shm)
{
    pthread_mutex_lock(&soft_owned_lock);
    soft_list_del(&shm->owned_link);
    pthread_mutex_unlock(&soft_owned_lock);
}

bool soft_shm_is_ours(const soft_shm_t *shm)
{
    return (shm->name[0] != '\0') && (shm->owner == getpid());
}

int soft_shm_create(soft_shm_t *shm, const char *name, size_t size)
{
    void *base;
    int fd, ret;

    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        ret = errno;
        tm_dev_error("soft: shm_open(%s) failed: %s", name, strerror(ret));
        return ret;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        ret = errno;
        tm_dev_error("soft: ftruncate(%s, %zu) failed: %s", name, size,
                     strerror(ret));
        goto err_unlink;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        ret = errno;
        tm_dev_error("soft: mmap(%s) failed: %s", name, strerror(ret));
        goto err_unlink;
    }
    close(fd);

    shm->base  = base;
    shm->size  = size;
    shm->owner = getpid();
    snprintf(shm->name, sizeof(shm->name), "%s", name);
    soft_owned_add(shm);
    return 0;

err_unlink:
    close(fd);
    shm_unlink(name);
    return ret;
}

int soft_shm_attach(soft_shm_t *shm, const char *name)
{
    struct stat st;
    void *base;
    int fd, ret;

    fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        ret = errno;
        tm_dev_debug("soft: cannot attach %s: %s", name, strerror(ret));
        return ret;
    }
    if (fstat(fd, &st) != 0) {
        ret = errno;
        close(fd);
        return ret;
    }
    if ((size_t)st.st_size < sizeof(soft_seg_hdr_t)) {
        close(fd);
        return EINVAL;
    }
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                fd, 0);
    ret  = errno;
    close(fd);
    if (base == MAP_FAILED) {
        return ret;
    }
    shm->base    = base;
    shm->size    = (size_t)st.st_size;
    shm->owner   = 0;
    shm->name[0] = '\0';
    return 0;
}

/* Unlinks a segment this process created; in a forked child, which only
 * inherited the mapping, it just unmaps */
void soft_shm_destroy(soft_shm_t *shm)
{
    if (shm->base == NULL) {
        return;
    }
    if (soft_shm_is_ours(shm)) {
        soft_owned_remove(shm);
        shm_unlink(shm->name);
    }
    shm->name[0] = '\0';
    munmap(shm->base, shm->size);
    shm->base = NULL;
}

void soft_shm_detach(soft_shm_t *shm)
{
    if (shm->base != NULL) {
        munmap(shm->base, shm->size);
        shm->base = NULL;
    }
}

void soft_seg_hdr_init(soft_seg_hdr_t *hdr, const soft_proc_id_t *owner,
                       uint32_t kind)
{
    hdr->version = SOFT_VERSION;
    hdr->owner   = *owner;
    hdr->kind    = kind;
    atomic_store_explicit(&hdr->closed, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    hdr->magic   = SOFT_MAGIC;
}

size_t soft_ring_seg_size(uint32_t ring_size)
{
    return sizeof(soft_ring_ctl_t) + ring_size;
}

/* Unlinks the segments of processes that died without cleaning up */
void soft_reclaim_leftovers(void)
{
    soft_proc_id_t owner;
    unsigned long long st;
    struct dirent *de;
    unsigned pid;
    DIR *dir;

    dir = opendir(SOFT_SHM_DIR);
    if (dir == NULL) {
        return;
    }
    while ((de = readdir(dir)) != NULL) {
        if (strncmp(de->d_name, SOFT_SHM_PREFIX, strlen(SOFT_SHM_PREFIX))) {
            continue;
        }
        if (sscanf(de->d_name + strlen(SOFT_SHM_PREFIX), "%u.%llu.", &pid,
                   &st) != 2) {
            continue;
        }
        owner.pid        = pid;
        owner.uid        = 0;
        owner.start_time = st;
        if (soft_proc_alive(&owner)) {
            continue;
        }
        if (shm_unlink(de->d_name) == 0) {
            tm_dev_debug("soft: reclaimed %s left by dead process %u",
                         de->d_name, pid);
        }
    }
    closedir(dir);
}
