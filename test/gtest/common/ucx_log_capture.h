/*
 * Error messages UCX logs while a ucx_log_capture exists, kept out of the
 * test output and open to the test's assertions.
 */
#ifndef RC_TM_TEST_UCX_LOG_CAPTURE_H_
#define RC_TM_TEST_UCX_LOG_CAPTURE_H_

#include <ucs/debug/log_def.h>

#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

namespace rc_tm_test {

class ucx_log_capture {
public:
    ucx_log_capture()
    {
        errors().clear();
        ucs_log_push_handler(handler);
    }

    ~ucx_log_capture()
    {
        ucs_log_pop_handler();
    }

    /* What was logged, for failure messages */
    std::string text() const
    {
        std::string all;
        for (const std::string &e : errors()) {
            all += "\n  logged: " + e;
        }
        return all;
    }

    bool has(const std::string &text) const
    {
        for (const std::string &e : errors()) {
            if (e.find(text) != std::string::npos) {
                return true;
            }
        }
        return false;
    }

    size_t count() const { return errors().size(); }

private:
    static std::vector<std::string> &errors()
    {
        static std::vector<std::string> lines;
        return lines;
    }

    static ucs_log_func_rc_t handler(const char *file, unsigned line,
                                     const char *function,
                                     ucs_log_level_t level,
                                     const ucs_log_component_config_t *conf,
                                     const char *message, va_list ap)
    {
        if (level > UCS_LOG_LEVEL_ERROR) {
            return UCS_LOG_FUNC_RC_CONTINUE;
        }
        char text[512];
        va_list copy;
        va_copy(copy, ap);
        vsnprintf(text, sizeof(text), message, copy);
        va_end(copy);
        errors().push_back(text);
        return UCS_LOG_FUNC_RC_STOP;
    }
};

} // namespace rc_tm_test

#endif
