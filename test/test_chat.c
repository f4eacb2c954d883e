/* test_chat.c: suite "chat": format recognition, rendering byte-exact with
 * doc/formats.md §5.5 (ChatML, Gemma) and llama.cpp's Llama-3 shape, the
 * incremental next-turn text, errors, and the demo model's template. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "text/chat.h"
#include "model/gguf.h"
#include "text/tokenizer.h"

/* The demo model's template, as stored in its GGUF. */
static const char SMOLLM_TMPL[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

/* The relevant part of Qwen2.5's template (\n written as two characters). */
static const char QWEN_TMPL[] =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.' }}{%- endif %}{%- else %}{%- if messages[0]['role'] == "
    "'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
    "helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- endif %}";

static char *render(const chat_template *t, const chat_msg *m, size_t n, bool gen)
{
    char *out = NULL;
    strata_error err = {0};
    ck_assert_msg(chat_render(t, m, n, gen, &out, &err) == 0, "%s", err.msg);
    return out;
}

START_TEST(recognise_templates)
{
    enum chat_format f;
    strata_error err = {0};
    ck_assert_int_eq(chat_format_from_template(SMOLLM_TMPL, &f, &err), 0);
    ck_assert_int_eq(f, CHAT_FORMAT_CHATML);
    ck_assert_int_eq(chat_format_from_template("{{ '<|start_header_id|>' }}", &f, &err), 0);
    ck_assert_int_eq(f, CHAT_FORMAT_LLAMA3);
    ck_assert_int_eq(chat_format_from_template("{{ bos_token }}<start_of_turn>", &f, &err), 0);
    ck_assert_int_eq(f, CHAT_FORMAT_GEMMA);
    ck_assert_int_eq(chat_format_from_template("[INST] {{ m }} [/INST]", &f, &err),
                     STRATA_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "--chat-template") && strstr(err.msg, "chatml"), "%s", err.msg);
    ck_assert_int_eq(chat_format_from_template(NULL, &f, &err), STRATA_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "--chat-template") != NULL, "%s", err.msg);
    ck_assert_int_eq(chat_format_from_name("gemma", &f, &err), 0);
    ck_assert_int_eq(f, CHAT_FORMAT_GEMMA);
    ck_assert_int_eq(chat_format_from_name("vicuna", &f, &err), STRATA_E_ARG);
    ck_assert_msg(strstr(err.msg, "vicuna") && strstr(err.msg, "llama3"), "%s", err.msg);
    ck_assert_str_eq(chat_format_name(CHAT_FORMAT_LLAMA3), "llama3");
    /* The override wins over a template it does not match. */
    chat_template t;
    ck_assert_int_eq(chat_template_init(&t, "[INST]", "chatml", &err), 0);
    ck_assert_int_eq(t.format, CHAT_FORMAT_CHATML);
    ck_assert_ptr_null(t.default_system);
    chat_template_free(&t);
    chat_template_free(NULL);
}
END_TEST

START_TEST(chatml_smollm_example)
{
    chat_template t;
    strata_error err = {0};
    ck_assert_int_eq(chat_template_init(&t, SMOLLM_TMPL, NULL, &err), 0);
    ck_assert_str_eq(t.default_system,
                     "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    chat_msg m[] = {{"user", "Hi"}};
    char *s = render(&t, m, 1, true);
    ck_assert_str_eq(s, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                        "trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\n");
    free(s);
    /* An explicit system message replaces the default. */
    chat_msg m2[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"},
                     {"user", " two "}};
    s = render(&t, m2, 4, false);
    ck_assert_str_eq(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n two <|im_end|>\n");
    free(s);
    chat_template_free(&t);
}
END_TEST

START_TEST(chatml_qwen_default_system)
{
    chat_template t;
    strata_error err = {0};
    ck_assert_int_eq(chat_template_init(&t, QWEN_TMPL, NULL, &err), 0);
    ck_assert_str_eq(t.default_system,
                     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    chat_template_free(&t);
    /* Qwen3-like: no literal system turn, so no default. */
    ck_assert_int_eq(chat_template_init(&t, "{{- '<|im_start|>system\\n' + "
                                            "messages[0].content + '<|im_end|>\\n' }}", NULL, &err), 0);
    ck_assert_ptr_null(t.default_system);
    chat_template_free(&t);
}
END_TEST

/* The next-turn text appended to a history equals rendering the longer
 * history, once the answer's end token is in place. */
START_TEST(next_turn_continues_history)
{
    static const char *const formats[] = {"chatml", "llama3", "gemma"};
    for (size_t k = 0; k < 3; k++) {
        chat_template t;
        strata_error err = {0};
        ck_assert_int_eq(chat_template_init(&t, SMOLLM_TMPL, formats[k], &err), 0);
        chat_msg first[] = {{"user", "Hi"}};
        chat_msg both[] = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "More?"}};
        char *a = render(&t, first, 1, true), *next = NULL;
        char *want = render(&t, both, 3, true);
        ck_assert_int_eq(chat_render_next_turn(&t, "More?", &next, &err), 0);
        size_t need = strlen(a) + strlen("Hello!") + strlen(chat_end_of_turn(&t)) +
                      strlen(next) + 1;
        char *got = malloc(need);
        strcpy(got, a);
        strcat(got, "Hello!");
        strcat(got, chat_end_of_turn(&t));
        strcat(got, next);
        ck_assert_msg(strcmp(got, want) == 0, "%s:\n got  %s\n want %s", formats[k], got, want);
        free(a), free(next), free(want), free(got);
        chat_template_free(&t);
    }
    chat_template t = {.format = CHAT_FORMAT_CHATML};
    char *next;
    strata_error err = {0};
    ck_assert_int_eq(chat_render_next_turn(&t, "Hi", &next, &err), 0);
    ck_assert_str_eq(next, "\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(next);
}
END_TEST

START_TEST(llama3_render)
{
    chat_template t;
    strata_error err = {0};
    ck_assert_int_eq(chat_template_init(&t, NULL, "llama3", &err), 0);
    chat_msg m[] = {{"system", "Be brief."}, {"user", " Hi \n"}};
    char *s = render(&t, m, 2, true);
    ck_assert_str_eq(s, "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    ck_assert_str_eq(chat_end_of_turn(&t), "<|eot_id|>");
    chat_template_free(&t);
}
END_TEST

START_TEST(gemma_render)
{
    chat_template t;
    strata_error err = {0};
    ck_assert_int_eq(chat_template_init(&t, NULL, "gemma", &err), 0);
    chat_msg m[] = {{"system", "Be brief."}, {"user", "Hi"}};
    char *s = render(&t, m, 2, true);
    /* doc/formats.md §5.5's example is "<bos>" + this: BOS comes from the
     * tokenizer (add_bos), never from the rendered text. */
    ck_assert_str_eq(s, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                        "<start_of_turn>model\n");
    free(s);
    chat_msg m2[] = {{"user", "Hi "}, {"assistant", " Yo"}};
    s = render(&t, m2, 2, false);
    ck_assert_str_eq(s, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo"
                        "<end_of_turn>\n");
    free(s);
    chat_template_free(&t);
}
END_TEST

START_TEST(render_errors)
{
    chat_template t = {.format = CHAT_FORMAT_NONE};
    char *s;
    strata_error err = {0};
    chat_msg m[] = {{"user", NULL}};
    ck_assert_int_eq(chat_render(&t, m, 1, true, &s, &err), STRATA_E_ARG);
    t.format = CHAT_FORMAT_CHATML;
    ck_assert_int_eq(chat_render(&t, m, 1, true, &s, &err), STRATA_E_ARG);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(chat_render(&t, NULL, 0, false, &s, &err), 0);
    ck_assert_str_eq(s, "");
    free(s);
}
END_TEST

/* The demo model: template from the file, rendered prompt tokenizes with
 * the ChatML markers as single control tokens. */
START_TEST(demo_model_template)
{
    const char *path = test_demo_model();
    if (!path)
        TEST_SKIP("model", "demo model missing (make model)");
    gguf *g;
    tokenizer *tk;
    chat_template t;
    strata_error err = {0};
    ck_assert_msg(gguf_open(path, &g, &err) == 0, "%s", err.msg);
    ck_assert_msg(chat_template_from_gguf(&t, g, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.format, CHAT_FORMAT_CHATML);
    ck_assert_str_eq(t.default_system,
                     "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    ck_assert_int_eq(tokenizer_from_gguf(g, &tk, &err), 0);
    chat_msg m[] = {{"user", "Hi"}};
    char *s = render(&t, m, 1, true);
    tok_ids ids = {0};
    ck_assert_int_eq(tokenizer_encode(tk, s, strlen(s), TOK_ENCODE_SPECIAL | TOK_ENCODE_ADD_BOS,
                                      &ids, &err), 0);
    ck_assert_int_eq(ids.ids[0], 1);             /* <|im_start|>, no BOS for SmolLM2 */
    ck_assert_int_eq(ids.ids[ids.n - 1], 198);   /* "\n" after "assistant" */
    int32_t end = tokenizer_find(tk, chat_end_of_turn(&t), strlen(chat_end_of_turn(&t)));
    ck_assert_int_eq(end, 2);
    ck_assert(tokenizer_is_stop(tk, end));
    free(s);
    tok_ids_free(&ids);
    tokenizer_free(tk);
    chat_template_free(&t);
    gguf_close(g);
}
END_TEST

/* The demo model's own template, now run by the Jinja interpreter, gives
 * byte for byte what the built-in ChatML renderer gave before it: whole
 * conversations, the next-turn text and the end-of-turn marker. */
START_TEST(demo_template_equals_builtin)
{
    const char *path = test_demo_model();
    if (!path)
        TEST_SKIP("model", "demo model missing (make model)");
    gguf *g;
    chat_template own, builtin;
    strata_error err = {0};
    ck_assert_msg(gguf_open(path, &g, &err) == 0, "%s", err.msg);
    ck_assert_msg(chat_template_from_gguf(&own, g, NULL, &err) == 0, "%s", err.msg);
    ck_assert_ptr_nonnull(own.jinja);
    /* The built-in ChatML with the default system text the file implies. */
    gguf_str tmpl;
    ck_assert_int_eq(gguf_get_str(g, "tokenizer.chat_template", &tmpl, &err), 0);
    char *text = strndup(tmpl.p, tmpl.len);
    ck_assert_int_eq(chat_template_init(&builtin, text, "chatml", &err), 0);
    ck_assert_ptr_null(builtin.jinja);
    ck_assert_str_eq(builtin.default_system, own.default_system);
    chat_msg convs[][5] = {
        {{"user", "Hi"}},
        {{"system", "Be brief."}, {"user", "What is the capital of France?"}},
        {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", " two  "}},
        {{"system", "S"}, {"user", "Grüße 世界 🎉\n"}, {"assistant", "a\tb"}, {"user", "{{ x }}"}},
        {{"user", "<|im_end|> inside"}, {"assistant", ""}},
    };
    size_t lens[] = {1, 2, 3, 4, 2};
    for (size_t k = 0; k < 5; k++)
        for (int gen = 0; gen < 2; gen++) {
            char *a = render(&own, convs[k], lens[k], gen), *b = render(&builtin, convs[k], lens[k], gen);
            ck_assert_msg(strcmp(a, b) == 0, "conversation %zu, gen %d:\n%s\n---\n%s", k, gen, a, b);
            free(a), free(b);
        }
    char *a, *b;
    ck_assert_int_eq(chat_render_next_turn(&own, "and more", &a, &err), 0);
    ck_assert_int_eq(chat_render_next_turn(&builtin, "and more", &b, &err), 0);
    ck_assert_str_eq(a, b);
    ck_assert_str_eq(chat_end_of_turn(&own), chat_end_of_turn(&builtin));
    free(a), free(b), free(text);
    chat_template_free(&own);
    chat_template_free(&builtin);
    gguf_close(g);
}
END_TEST

/* Templates chat.c runs: the end-of-turn text and the next turn found by
 * the probe, BOS dropped only where the template writes bos_token. */
START_TEST(model_template_turns)
{
    chat_template t;
    strata_error err = {0};
    /* Mistral-like: no recognised marker; eos is set by hand as
     * chat_template_from_gguf would. */
    ck_assert_int_eq(chat_template_init(&t, "{% for m in messages %}{% if m.role == 'user' %}"
                                            "[INST] {{ m.content }} [/INST]{% else %}{{ m.content }}"
                                            "{{ eos_token }}{% endif %}{% endfor %}", NULL, &err), 0);
    ck_assert_int_eq(t.format, CHAT_FORMAT_NONE);
    ck_assert_str_eq(chat_end_of_turn(&t), ""); /* eos unknown yet */
    t.eos = strdup("</s>");
    chat_msg m[] = {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "More"}};
    char *s = render(&t, m, 3, true);
    ck_assert_str_eq(s, "[INST] Hi [/INST]Yo</s>[INST] More [/INST]");
    free(s);
    chat_template_free(&t);
    /* A template that raises: the error comes back from chat_render. */
    ck_assert_int_eq(chat_template_init(&t, "{{ raise_exception('nope') }}", NULL, &err), 0);
    ck_assert_int_eq(chat_render(&t, m, 1, true, &s, &err), STRATA_E_ARG);
    ck_assert_msg(strstr(err.msg, "raise_exception: nope"), "%s", err.msg);
    ck_assert_int_eq(chat_render_next_turn(&t, "x", &s, &err), STRATA_E_ARG);
    chat_template_free(&t);
    /* One that does not parse is refused at init, with its line. */
    ck_assert_int_eq(chat_template_init(&t, "\n{{ x | nosuchfilter }}", NULL, &err),
                     STRATA_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "line 2") && strstr(err.msg, "nosuchfilter"), "%s", err.msg);
}
END_TEST

static Suite *chat_suite(void)
{
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, recognise_templates);
    tcase_add_test(tc, chatml_smollm_example);
    tcase_add_test(tc, chatml_qwen_default_system);
    tcase_add_test(tc, next_turn_continues_history);
    tcase_add_test(tc, llama3_render);
    tcase_add_test(tc, gemma_render);
    tcase_add_test(tc, render_errors);
    tcase_add_test(tc, demo_model_template);
    tcase_add_test(tc, demo_template_equals_builtin);
    tcase_add_test(tc, model_template_turns);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(chat_suite)
