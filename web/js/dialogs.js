// The two modal dialogs of index.html: dialog#confirm (every action says
// exactly what will happen and asks yes/no) and dialog#silence-dialog.
// Both resolve to null when cancelled.
import { esc } from './util.js';

// Opens `dialog`, resolves with `collect()` on yes, null on no / Escape.
function ask(dialog, collect) {
  return new Promise((resolve) => {
    const done = (value) => {
      dialog.removeEventListener('click', onClick);
      dialog.removeEventListener('cancel', onCancel);
      if (dialog.open) dialog.close();
      resolve(value);
    };
    const onClick = (e) => {
      const b = e.target.closest('button[data-confirm]');
      if (b) done(b.dataset.confirm === 'yes' ? collect() : null);
    };
    const onCancel = (e) => { e.preventDefault(); done(null); };
    dialog.addEventListener('click', onClick);
    dialog.addEventListener('cancel', onCancel);
    dialog.showModal();
  });
}

// Asks to confirm. `text` says what will happen; `comment` shows a
// comment box. Resolves to {comment} or null.
export function confirmAction({ title, text, yes = 'Confirm', comment = false }) {
  const d = document.getElementById('confirm');
  d.querySelector('[data-field=title]').textContent = title;
  d.querySelector('[data-field=text]').textContent = text;
  d.querySelector('[data-field=comment-row]').hidden = !comment;
  const box = d.querySelector('textarea[name=comment]');
  box.value = '';
  d.querySelector('button[data-confirm=yes]').textContent = yes;
  return ask(d, () => ({ comment: box.value.trim() }));
}

// Asks for a silence. `matchers` = [{name, value, checked}]; resolves to
// {matchers: [{name, value}], duration_minutes, comment} or null.
export function askSilence({ text, matchers }) {
  const d = document.getElementById('silence-dialog');
  d.querySelector('[data-field=text]').textContent = text;
  const box = d.querySelector('[data-field=matchers]');
  box.innerHTML = '<legend>Silence incidents matching all of</legend>' + matchers.map((m) =>
    `<label><input type="checkbox" name="matcher" value="${esc(m.name)}" data-value="${esc(m.value)}"` +
    `${m.checked ? ' checked' : ''}> ${esc(m.name)} = <code>${esc(m.value)}</code></label>`).join('');
  d.querySelector('textarea[name=comment]').value = '';
  return ask(d, () => ({
    matchers: [...box.querySelectorAll('input[name=matcher]:checked')]
      .map((i) => ({ name: i.value, value: i.dataset.value })),
    duration_minutes: Number(d.querySelector('select[name=duration]').value),
    comment: d.querySelector('textarea[name=comment]').value.trim(),
  }));
}
