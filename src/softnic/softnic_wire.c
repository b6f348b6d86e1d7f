/*
 * Software NIC: shared-memory segments and the processes that own them
 * (softnic_wire.h), the leftovers of processes that died, and logging.
 *
 * The owner unlinks its segments when it destroys them and at exit; a
 * process killed before that leaves them behind, and the next device
 * opened on the host unlinks those whose owner is gone.  The device's
 * numbers (QP, TM-SRQ) and their owners, kept in the same directory as
 * symbolic links, are taken, read and given back here too (the registry,
 * softnic_wire.h).
 */
#include "softnic_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SN_SHM_DIR "/dev/shm"

/* Segments this process created and has not destroyed: unlinked at exit.
 * A list through the segments themselves, so that any number is tracked (a
 * process that never closes its contexts may own thousands).  A forked
 * child inherits a copy: only the process that created a segment unlinks
 * it, and the child starts a list of its own with its first segment. */
static pthread_mutex_t sn_owned_lock = PTHREAD_MUTEX_INITIALIZER;
static sn_list_t sn_owned = { &sn_owned, &sn_owned };
static pid_t sn_owned_pid;
static bool sn_atexit_done;

static softnic_log_func_t sn_log_func;

void softnic_set_log(softnic_log_func_t func)
{
    sn_log_func = func;
}

void sn_log(softnic_log_level_t level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (sn_log_func != NULL) {
        sn_log_func(level, fmt, ap);
    } else if (level == SOFTNIC_LOG_ERROR) {
        fprintf(stderr, "softnic: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

uint64_t sn_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reads state (field 3) and start time (field 22) of /proc/<pid>/stat */
static int sn_proc_stat(pid_t pid, char *state, uint64_t *start_time)
{
    char path[64], buf[1024], *p;
    unsigned long long st;
    ssize_t n;
    int fd, field, ret;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    ret = (n < 0) ? errno : ESRCH;  /* nothing to read: the process is gone */
    close(fd);
    if (n <= 0) {
        return ret;
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

int sn_proc_start_time(pid_t pid, uint64_t *start_time)
{
    char state;

    return sn_proc_stat(pid, &state, start_time);
}

int sn_proc_self(sn_proc_id_t *id)
{
    id->pid = (uint32_t)getpid();
    id->uid = (uint32_t)getuid();
    return sn_proc_start_time(getpid(), &id->start_time);
}

/* Alive: same pid and start time (any, when start_time is NULL), and not
 * a zombie (which never answers).  Only a process that is no more is dead:
 * a /proc read that fails for another reason (no file descriptor left,
 * memory) says nothing, and the next check asks again. */
static bool sn_pid_alive(uint32_t pid, const uint64_t *start_time)
{
    uint64_t st;
    char state;
    int ret;

    ret = sn_proc_stat((pid_t)pid, &state, &st);
    if (ret != 0) {
        return (ret != ENOENT) && (ret != ESRCH);
    }
    return ((start_time == NULL) || (st == *start_time)) &&
           (state != 'Z') && (state != 'X');
}

bool sn_proc_alive(const sn_proc_id_t *id)
{
    return sn_pid_alive(id->pid, &id->start_time);
}

bool sn_proc_pid_alive(uint32_t pid)
{
    return sn_pid_alive(pid, NULL);
}

bool sn_proc_word_alive(uint64_t word)
{
    uint64_t st;
    char state;
    int ret;

    ret = sn_proc_stat((pid_t)(uint32_t)word, &state, &st);
    if (ret != 0) {
        return (ret != ENOENT) && (ret != ESRCH);
    }
    return ((uint32_t)st == (uint32_t)(word >> 32)) && (state != 'Z') &&
           (state != 'X');
}

uint32_t sn_host_id(void)
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

/* kind 0: the device segment; 'q' a QP's ring, 's' an SRQ's accept queue */
void sn_seg_name(char *buf, size_t len, const sn_proc_id_t *owner,
                 uint32_t dev_seq, char kind, uint32_t seq)
{
    if (kind == 0) {
        snprintf(buf, len, SN_SHM_PREFIX "%u.%llu.d%u", owner->pid,
                 (unsigned long long)owner->start_time, dev_seq);
    } else {
        snprintf(buf, len, SN_SHM_PREFIX "%u.%llu.d%u.%c%u", owner->pid,
                 (unsigned long long)owner->start_time, dev_seq, kind, seq);
    }
}

static void sn_owned_atexit(void)
{
    sn_shm_t *shm;

    pthread_mutex_lock(&sn_owned_lock);
    if (sn_owned_pid == getpid()) {
        while (!sn_list_empty(&sn_owned)) {
            shm = sn_container_of(sn_owned.next, sn_shm_t, owned_link);
            sn_list_del(&shm->owned_link);
            shm_unlink(shm->name);
            shm->name[0] = '\0';   /* a later destroy only unmaps it */
        }
    }
    pthread_mutex_unlock(&sn_owned_lock);
}

static void sn_owned_add(sn_shm_t *shm)
{
    pthread_mutex_lock(&sn_owned_lock);
    if (sn_owned_pid != shm->owner) {
        /* first segment of this process, or of a forked child: the
         * inherited list names the parent's segments */
        sn_list_init(&sn_owned);
        sn_owned_pid = shm->owner;
    }
    if (!sn_atexit_done) {
        atexit(sn_owned_atexit);
        sn_atexit_done = true;
    }
    sn_list_add_tail(&sn_owned, &shm->owned_link);
    pthread_mutex_unlock(&sn_owned_lock);
}

static void sn_owned_remove(sn_shm_t *shm)
{
    pthread_mutex_lock(&sn_owned_lock);
    sn_list_del(&shm->owned_link);
    pthread_mutex_unlock(&sn_owned_lock);
}

bool sn_shm_is_ours(const sn_shm_t *shm)
{
    return (shm->name[0] != '\0') && (shm->owner == getpid());
}

int sn_shm_create(sn_shm_t *shm, const char *name, size_t size)
{
    void *base;
    int fd, ret;

    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        ret = errno;
        /* a name taken is the caller's to handle (sn_ctx_bring_up) */
        sn_log((ret == EEXIST) ? SOFTNIC_LOG_DEBUG : SOFTNIC_LOG_ERROR,
               "shm_open(%s) failed: %s", name, strerror(ret));
        return ret;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        ret = errno;
        sn_error("ftruncate(%s, %zu) failed: %s", name, size,
                 strerror(ret));
        goto err_unlink;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        ret = errno;
        sn_error("mmap(%s) failed: %s", name, strerror(ret));
        goto err_unlink;
    }
    close(fd);

    shm->base  = base;
    shm->size  = size;
    shm->owner = getpid();
    snprintf(shm->name, sizeof(shm->name), "%s", name);
    sn_owned_add(shm);
    return 0;

err_unlink:
    close(fd);
    shm_unlink(name);
    return ret;
}

int sn_shm_attach(sn_shm_t *shm, const char *name)
{
    struct stat st;
    void *base;
    int fd, ret;

    fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        ret = errno;
        sn_debug("cannot attach %s: %s", name, strerror(ret));
        return ret;
    }
    if (fstat(fd, &st) != 0) {
        ret = errno;
        close(fd);
        return ret;
    }
    if ((size_t)st.st_size < sizeof(sn_seg_hdr_t)) {
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
void sn_shm_destroy(sn_shm_t *shm)
{
    if (shm->base == NULL) {
        return;
    }
    if (sn_shm_is_ours(shm)) {
        sn_owned_remove(shm);
        shm_unlink(shm->name);
    }
    shm->name[0] = '\0';
    munmap(shm->base, shm->size);
    shm->base = NULL;
}

void sn_shm_detach(sn_shm_t *shm)
{
    if (shm->base != NULL) {
        munmap(shm->base, shm->size);
        shm->base = NULL;
    }
}

void sn_seg_hdr_init(sn_seg_hdr_t *hdr, const sn_proc_id_t *owner,
                     uint32_t kind)
{
    hdr->version = SN_VERSION;
    hdr->owner   = *owner;
    hdr->kind    = kind;
    atomic_store_explicit(&hdr->closed, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    hdr->magic   = SN_MAGIC;
}

/* ---- the device's numbers (softnic_wire.h) ---- */

#define SN_NUM_MIN    0x100     /* below: QP0, QP1 and what no NIC gives */
#define SN_NUM_MAX    0xffffff  /* 24 bits */
#define SN_NUM_TRIES  4096      /* then the device is out of numbers */

static pthread_mutex_t sn_num_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t sn_num_pid;
static uint32_t sn_num_cursor;

static void sn_num_name(char *buf, size_t len, uint32_t uid, char kind,
                        uint32_t num)
{
    snprintf(buf, len, SN_SHM_PREFIX "u%u.%c%u", uid, kind, num);
}

/* What an entry points to: the owner's device segment name, less the
 * prefix */
static void sn_num_target(char *buf, size_t len, const sn_proc_id_t *owner,
                          uint32_t dev_seq)
{
    snprintf(buf, len, "%u.%llu.d%u", owner->pid,
             (unsigned long long)owner->start_time, dev_seq);
}

/* The next number to try.  Each process starts at a place of its own in
 * the space (a hash of its identity), so that processes seldom try the
 * same numbers: the first try nearly always succeeds. */
static uint32_t sn_num_candidate(const sn_proc_id_t *self)
{
    uint32_t n;

    pthread_mutex_lock(&sn_num_lock);
    if (sn_num_pid != getpid()) {   /* first use, or a forked child */
        sn_num_pid    = getpid();
        sn_num_cursor = (self->pid * 2654435761u) ^
                        ((uint32_t)self->start_time * 40503u);
    }
    n = SN_NUM_MIN + (sn_num_cursor++ % (SN_NUM_MAX - SN_NUM_MIN + 1));
    pthread_mutex_unlock(&sn_num_lock);
    return n;
}

int sn_num_alloc(const sn_proc_id_t *owner, uint32_t dev_seq, char kind,
                 uint32_t *num, sn_shm_t *entry)
{
    char target[64], path[160];
    uint32_t n;
    int i, ret;

    sn_num_target(target, sizeof(target), owner, dev_seq);
    for (i = 0; i < SN_NUM_TRIES; ++i) {
        n = sn_num_candidate(owner);
        sn_num_name(entry->name, sizeof(entry->name), owner->uid, kind, n);
        snprintf(path, sizeof(path), SN_SHM_DIR "/%s", entry->name);
        if (symlink(target, path) == 0) {
            entry->base  = NULL;
            entry->size  = 0;
            entry->owner = getpid();
            sn_owned_add(entry);    /* unlinked at exit */
            *num = n;
            return 0;
        }
        if (errno != EEXIST) {      /* taken: the next one */
            ret = errno;
            sn_error("symlink(%s) failed: %s", path, strerror(ret));
            entry->name[0] = '\0';
            return ret;
        }
    }
    sn_error("no free %c number after %d tries", kind, SN_NUM_TRIES);
    entry->name[0] = '\0';
    return ENOMEM;
}

void sn_num_free(sn_shm_t *entry)
{
    if (sn_shm_is_ours(entry)) {    /* not a forked child's copy */
        sn_owned_remove(entry);
        shm_unlink(entry->name);
    }
    entry->name[0] = '\0';
}

/* The owner an entry names: 0, ENOENT (none), EINVAL (not an entry) */
static int sn_num_read(const char *name, sn_proc_id_t *owner,
                       uint32_t *dev_seq)
{
    char path[160], target[64];
    unsigned long long st;
    unsigned pid, dev;
    ssize_t len;
    char end;

    snprintf(path, sizeof(path), SN_SHM_DIR "/%s", name);
    len = readlink(path, target, sizeof(target) - 1);
    if (len < 0) {
        return (errno == EINVAL) ? EINVAL : ENOENT;
    }
    target[len] = '\0';
    if (sscanf(target, "%u.%llu.d%u%c", &pid, &st, &dev, &end) != 3) {
        return EINVAL;
    }
    owner->pid        = pid;
    owner->start_time = st;
    *dev_seq          = dev;
    return 0;
}

int sn_num_owner(uint32_t uid, char kind, uint32_t num, sn_proc_id_t *owner,
                 uint32_t *dev_seq)
{
    char name[96];
    int ret;

    sn_num_name(name, sizeof(name), uid, kind, num);
    ret = sn_num_read(name, owner, dev_seq);
    if (ret != 0) {
        return ENOENT;
    }
    owner->uid = uid;
    if (!sn_proc_alive(owner)) {
        return ESRCH;               /* left by a process that died */
    }
    return 0;
}

/* Whether a registry entry of ours (u<uid>.<kind><num>) names a dead
 * owner */
static bool sn_num_is_stale(const char *name)
{
    sn_proc_id_t owner;
    uint32_t dev_seq;

    if (sn_num_read(name, &owner, &dev_seq) != 0) {
        return false;               /* gone, or not an entry */
    }
    return !sn_proc_alive(&owner);
}

/* The registry's lock: held while stale entries are unlinked, so that two
 * sweeps never both judge an entry stale and the second then unlink the
 * number a live QP took in between (taking and giving back a number need
 * no lock: only the owner unlinks a live entry) */
static int sn_num_lock_take(void)
{
    char path[160];
    int fd;

    snprintf(path, sizeof(path), SN_SHM_DIR "/" SN_SHM_PREFIX "u%u.lock",
             (unsigned)getuid());
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -1;
    }
    if (flock(fd, LOCK_EX) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A stale entry, unlinked after a second look under the lock */
static void sn_num_reclaim(const char *name, int *lock_fd)
{
    if (!sn_num_is_stale(name)) {
        return;
    }
    if ((*lock_fd < 0) && ((*lock_fd = sn_num_lock_take()) < 0)) {
        return;
    }
    if (sn_num_is_stale(name) && (shm_unlink(name) == 0)) {
        sn_debug("reclaimed %s left by a dead process", name);
    }
}

/* Unlinks the segments, and the registry entries of our user, of
 * processes that died without cleaning up */
void sn_reclaim_leftovers(void)
{
    const size_t plen = strlen(SN_SHM_PREFIX);
    sn_proc_id_t owner;
    unsigned long long st;
    struct dirent *de;
    int lock_fd = -1;
    char own_num[32];
    unsigned pid;
    DIR *dir;

    snprintf(own_num, sizeof(own_num), "u%u.", (unsigned)getuid());
    dir = opendir(SN_SHM_DIR);
    if (dir == NULL) {
        return;
    }
    while ((de = readdir(dir)) != NULL) {
        if (strncmp(de->d_name, SN_SHM_PREFIX, plen)) {
            continue;
        }
        if (!strncmp(de->d_name + plen, own_num, strlen(own_num))) {
            sn_num_reclaim(de->d_name, &lock_fd);
            continue;
        }
        if (sscanf(de->d_name + plen, "%u.%llu.", &pid, &st) != 2) {
            continue;
        }
        owner.pid        = pid;
        owner.uid        = 0;
        owner.start_time = st;
        if (sn_proc_alive(&owner)) {
            continue;
        }
        if (shm_unlink(de->d_name) == 0) {
            sn_debug("reclaimed %s left by dead process %u",
                     de->d_name, pid);
        }
    }
    closedir(dir);
    if (lock_fd >= 0) {
        close(lock_fd);             /* and the lock with it */
    }
}
