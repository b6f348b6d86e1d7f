/*
 * What the process writes to its standard output while a stdout_capture
 * exists: file descriptor 1 goes to a temporary file, and back at text().
 * UCX's log stream is stdout unless UCX_LOG_FILE names another.
 */
#ifndef RC_TM_TEST_COMMON_STDOUT_CAPTURE_H_
#define RC_TM_TEST_COMMON_STDOUT_CAPTURE_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

class stdout_capture {
public:
    stdout_capture()
    {
        char path[] = "/tmp/rc_tm_stdout_XXXXXX";

        fflush(stdout);
        m_fd = mkstemp(path);
        if (m_fd >= 0) {
            unlink(path);
            m_saved = dup(STDOUT_FILENO);
            dup2(m_fd, STDOUT_FILENO);
        }
    }

    ~stdout_capture() { text(); }

    bool ok() const { return m_fd >= 0; }

    /* Ends the capture (once) and returns what was written; the text also
     * goes to the real stdout, for the test's log */
    const std::string &text()
    {
        char buf[4096];
        ssize_t n;

        if (m_saved < 0) {
            return m_text;
        }
        fflush(stdout);
        dup2(m_saved, STDOUT_FILENO);
        close(m_saved);
        m_saved = -1;
        lseek(m_fd, 0, SEEK_SET);
        while ((n = read(m_fd, buf, sizeof(buf))) > 0) {
            m_text.append(buf, n);
        }
        close(m_fd);
        fputs(m_text.c_str(), stdout);
        fflush(stdout);
        return m_text;
    }

    stdout_capture(const stdout_capture&)            = delete;
    stdout_capture &operator=(const stdout_capture&) = delete;

private:
    int         m_fd    = -1;
    int         m_saved = -1;
    std::string m_text;
};

#endif
