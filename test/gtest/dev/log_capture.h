/*
 * Captures what the device layer logs, for tests that check a message.
 */
#ifndef RC_TM_TEST_DEV_LOG_CAPTURE_H_
#define RC_TM_TEST_DEV_LOG_CAPTURE_H_

#include "dev/tm_dev.h"

#include <stdarg.h>
#include <stdio.h>

#include <string>
#include <vector>

inline std::vector<std::string> &captured_log()
{
    static std::vector<std::string> lines;
    return lines;
}

inline void capture_log(tm_dev_log_level_t level, const char *file, int line,
                        const char *fmt, va_list ap)
{
    char buf[512];

    (void)level; (void)file; (void)line;
    vsnprintf(buf, sizeof(buf), fmt, ap);
    captured_log().push_back(buf);
}

/* While it lives, the device layer logs into captured_log() */
class log_capture {
public:
    log_capture()  { captured_log().clear(); tm_dev_set_log_func(capture_log); }
    ~log_capture() { tm_dev_set_log_func(NULL); }

    bool contains(const std::string &s) const {
        for (const std::string &line : captured_log()) {
            if (line.find(s) != std::string::npos) {
                return true;
            }
        }
        return false;
    }
};

#endif
