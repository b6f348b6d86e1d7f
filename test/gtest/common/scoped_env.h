/*
 * An environment variable set (or unset) for the life of an object.
 */
#ifndef RC_TM_TEST_COMMON_SCOPED_ENV_H_
#define RC_TM_TEST_COMMON_SCOPED_ENV_H_

#include <stdlib.h>

#include <string>

/* value nullptr unsets the variable; the destructor restores what was */
class scoped_env {
public:
    scoped_env(const char *name, const char *value) : m_name(name)
    {
        const char *old = getenv(name);

        m_had = (old != nullptr);
        m_old = m_had ? old : "";
        if (value != nullptr) {
            setenv(name, value, 1);
        } else {
            unsetenv(name);
        }
    }

    ~scoped_env()
    {
        if (m_had) {
            setenv(m_name.c_str(), m_old.c_str(), 1);
        } else {
            unsetenv(m_name.c_str());
        }
    }

    scoped_env(const scoped_env&)            = delete;
    scoped_env &operator=(const scoped_env&) = delete;

private:
    std::string m_name, m_old;
    bool        m_had;
};

#endif
